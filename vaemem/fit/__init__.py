"""Fitting: the upper envelope (:func:`fit_envelope`) and the coefficient file (:mod:`vaemem.fit.coefficients`)."""

from vaemem.fit.envelope import Line, fit_envelope

__all__ = ["Line", "fit_envelope"]
