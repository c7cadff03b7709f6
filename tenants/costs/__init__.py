"""Showback in one place: what each cluster's resources cost (prices), what a tenant's months cost (showback, a
pure computation), the reads that feed it (selectors), and the API, CSV and pages that show it."""
