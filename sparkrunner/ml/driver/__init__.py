"""Spark ML stages on the driver: the estimators and models users build, fit and save, and the fit itself."""
