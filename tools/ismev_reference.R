# The R ismev reference of the GEV MLE on Port Pirie and the negated glass-fibre strengths
# (issue 30: "estimates equal to R ismev on Port Pirie and glass to 1e-4"), as pasted into
# tests/evt/test_mle.py (ISMEV_REFERENCE).
#
# Usage (from the repository root):
#   Rscript tools/ismev_reference.R ISMEV_GIT_DIR SHARED_EVT_DIR
#   e.g. Rscript tools/ismev_reference.R /work/.mirror/cran+ismev/repo /work/shared/data/evt
#
# ISMEV_GIT_DIR: a git clone of the CRAN mirror of ismev (github cran/ismev); its HEAD's
# R/gev.R is sourced as it is (ismev is pure R: no installation needed). The data are the
# shared csv files; the script checks them against ismev's own data/portpirie.rda and
# data/glass.rda first. Printed: R's version, ismev's commit and version, then per data set
# gev.fit's estimates (mu, sigma, xi), standard errors, negative log-likelihood and optim's
# convergence code, once with ismev's defaults (Nelder-Mead, optim's default reltol ~1.5e-8)
# and once with a tight reltol (1e-14, restarted from the first optimum until it stops moving),
# which shows how far the default optimum is from the true one.
args <- commandArgs(trailingOnly = TRUE)
if (length(args) != 2) stop("usage: Rscript tools/ismev_reference.R ISMEV_GIT_DIR SHARED_EVT_DIR")
repo <- args[1]
evt <- args[2]
git <- function(...) system2("git", c("-C", repo, ...), stdout = TRUE)
commit <- git("rev-parse", "HEAD")
desc <- git("show", "HEAD:DESCRIPTION")
version <- sub("^Version: *", "", grep("^Version:", desc, value = TRUE))
src <- tempfile(fileext = ".R")
writeLines(git("show", "HEAD:R/gev.R"), src)
source(src)

ismev_data <- function(name) {
  rda <- tempfile(fileext = ".rda")
  # binary file: copied with git cat-file into a file, not through a character vector
  system2("git", c("-C", repo, "cat-file", "blob", paste0("HEAD:data/", name, ".rda")), stdout = rda)
  env <- new.env()
  load(rda, envir = env)
  get(name, envir = env)
}
portpirie <- read.csv(file.path(evt, "portpirie.csv"))$SeaLevel
glass <- read.csv(file.path(evt, "glass.csv"))$Strength
stopifnot(isTRUE(all.equal(portpirie, ismev_data("portpirie")$SeaLevel, tolerance = 0)))
stopifnot(isTRUE(all.equal(sort(glass), sort(as.numeric(unlist(ismev_data("glass")))), tolerance = 0)))

cat(sprintf("R: %s\n", R.version.string))
cat(sprintf("ismev: %s, commit %s\n", version, commit))
show_fit <- function(label, fit) {
  cat(sprintf("%-28s mle %s\n%-28s se  %s\n%-28s nllh %.10f conv %d\n", label,
              paste(sprintf("%.10f", fit$mle), collapse = " "), "",
              paste(sprintf("%.10f", fit$se), collapse = " "), "", fit$nllh, fit$conv))
}
for (name in c("portpirie", "glass_negated")) {
  x <- if (name == "portpirie") portpirie else -glass
  default <- gev.fit(x, show = FALSE)
  show_fit(paste(name, "(ismev defaults)"), default)
  tight <- default
  for (i in 1:20) {
    prev <- tight$nllh
    tight <- gev.fit(x, show = FALSE, muinit = tight$mle[1], siginit = tight$mle[2], shinit = tight$mle[3],
                     reltol = 1e-14)
    if (abs(prev - tight$nllh) < 1e-13) break
  }
  show_fit(paste(name, "(reltol 1e-14)"), tight)
}
