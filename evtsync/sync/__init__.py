"""Synchronization: the collectives of each process group aligned across its
ranks (collectives.py, methodology §2) and their tax (tax.py, §3).
"""
