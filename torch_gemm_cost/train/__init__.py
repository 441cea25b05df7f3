"""Fitting the predictors on measured data."""
