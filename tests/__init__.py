"""The tests: a folder per package of evtsync (tests/<package>/), project/ for the
repository as a whole."""
