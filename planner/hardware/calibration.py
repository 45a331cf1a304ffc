"""Calibration: how far the roofline is from a measured profile, and a fitted correction.

``compare_roofline`` lists, for every model and profiled width n, the measured T(n), the
roofline's and the relative error ``(roofline - measured) / measured``. ``fit_calibration``
chooses the fractions of peak (bandwidth and compute efficiency) and the overheads (per
forward, per layer) that minimise the squared log-ratio between the two over every point,
with a soft-L1 loss so that one disturbed measurement (a shared machine) does not steer the
fit (scipy.optimize.least_squares, trust-region reflective, bounds keep all four >= 0).

The fitted :class:`~specplan.planner.hardware.roofline.Calibration` applies as a whole to the device
it was fitted on; for another SKU only the efficiencies are carried over (overheads belong to
the software stack of the machine measured).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from specplan.core.errors import ProfileError
from specplan.core.profile import Profile

from .roofline import Calibration, DeviceRoof, precision_for, roofline_ms
from .sku import model_shape


@dataclass(frozen=True)
class RooflinePoint:
    """One profiled point: model, context, n, measured and modelled ms (and the batch, T(n, b))."""

    model: str
    context: int
    n: int
    measured_ms: float
    roofline_ms: float
    batch: int = 1

    @property
    def error(self) -> float:
        """Relative error of the roofline, (roofline - measured) / measured."""
        return (self.roofline_ms - self.measured_ms) / self.measured_ms


def _measured_points(profile: Profile) -> list[tuple[str, object, object, int, int, float, int]]:
    """(model id, shape, precision, context, n, ms, batch) for every measured curve point."""
    points = []
    for model in profile.models:
        shape = model_shape(profile, model)
        try:
            precision = precision_for(model.quant, model.dtype)
        except ValueError as exc:
            raise ProfileError(f"model {model.id!r}: {exc}; fix the profile's quant / dtype") from None
        for curve in model.latency:
            if curve.source != "measured":
                continue
            for n, ms in zip(curve.n, curve.ms):
                points.append((model.id, shape, precision, curve.context, n, ms, curve.batch))
    return points


def compare_roofline(profile: Profile, device: DeviceRoof,
                     calibration: Calibration | None = None) -> list[RooflinePoint]:
    """Measured vs roofline T(n) at every measured point of ``profile`` on ``device``."""
    return [RooflinePoint(model_id, context, n, ms, roofline_ms(shape, precision, n, context, device, calibration, batch),
                          batch)
            for model_id, shape, precision, context, n, ms, batch in _measured_points(profile)]


def fit_calibration(profile: Profile, device: DeviceRoof, label: str = "") -> Calibration:
    """Efficiencies and overheads that make the roofline match ``profile``'s measured curves.

    Parameters
    ----------
    profile : Profile
        Measured on the machine that ``device`` describes (curves with ``source: measured``).
    device : DeviceRoof
        Its datasheet / measured figures.
    label : str
        Recorded in ``Calibration.source`` as ``fitted:<label>``.

    Returns
    -------
    Calibration
        The least-squares fit of log T (soft-L1 loss); the datasheet calibration when the
        profile has fewer than 3 measured points.
    """
    points = _measured_points(profile)
    if len(points) < 3:
        return Calibration()

    def calibration_of(theta: np.ndarray) -> Calibration:
        return Calibration(float(theta[0]), float(theta[1]), float(theta[2]) * 1e3, float(theta[3]) * 1e3,
                           f"fitted:{label}" if label else "fitted")

    def residuals(theta: np.ndarray) -> np.ndarray:
        calibration = calibration_of(theta)
        return np.array([math.log(roofline_ms(shape, precision, n, context, device, calibration, batch) / ms)
                         for _, shape, precision, context, n, ms, batch in points])

    start = np.array([0.5, 0.5, device.overhead_per_forward_us / 1e3, device.overhead_per_layer_us / 1e3])
    result = least_squares(residuals, start, bounds=([1e-3, 1e-3, 0.0, 0.0], [1.0, 1.0, 1e3, 1e2]),
                           loss="soft_l1", f_scale=0.1)
    return calibration_of(result.x)


def transfer(calibration: Calibration) -> Calibration:
    """The part of a calibration that carries over to another device: the efficiencies."""
    return replace(calibration, overhead_per_forward_us=None, overhead_per_layer_us=None)


def error_table(points: list[RooflinePoint], fitted: list[RooflinePoint] | None = None) -> str:
    """A text table: model, context, n, measured ms, roofline ms, error (and fitted columns)."""
    header = f"{'model':<16} {'ctx':>5} {'b':>3} {'n':>4} {'measured':>10} {'roofline':>10} {'error':>8}"
    if fitted is not None:
        header += f" {'fitted':>10} {'error':>8}"
    lines = [header]
    for index, point in enumerate(points):
        line = (f"{point.model:<16} {point.context:>5} {point.batch:>3} {point.n:>4} {point.measured_ms:>10.2f} "
                f"{point.roofline_ms:>10.2f} {point.error:>+8.1%}")
        if fitted is not None:
            line += f" {fitted[index].roofline_ms:>10.2f} {fitted[index].error:>+8.1%}"
        lines.append(line)
    return "\n".join(lines)
