//! Lattice (shape) transforms of a finite crystal.

use crate::real::Real;

/// Fourier transform of a grating of `n` slits (`sincg` in nanoBragg.c):
/// `sin(n x) / sin(x)`, with the limit `n` at `x == 0`.
#[inline(always)]
pub fn sincg<R: Real>(x: R, n: R) -> R {
    if x == R::zero() {
        return n;
    }
    (x * n).sin() / x.sin()
}

/// Fourier transform of a sphere (`sinc3` in nanoBragg.c):
/// `3 (sin x / x - cos x) / x²`, with the limit 1 at `x == 0`.
#[inline(always)]
pub fn sinc3<R: Real>(x: R) -> R {
    if x == R::zero() {
        return R::one();
    }
    R::c(3.0) * (x.sin() / x - x.cos()) / (x * x)
}

/// Ratio that makes a sphere's `sinc3` peak match a cube's volume
/// (nanoBragg.c's constant for `-round_xtal`).
pub const ROUND_XTAL_SCALE: f64 = 0.723601254558268;
/// Gaussian spot width constant of `-gauss_xtal`.
pub const GAUSS_XTAL_WIDTH: f64 = 0.63;
/// Squared radius at which `-tophat_spots` cuts the spot.
pub const TOPHAT_RADIUS_SQR: f64 = 0.3969;

#[cfg(test)]
mod tests {
    use super::*;
    use std::f64::consts::PI;

    #[test]
    fn sincg_limits() {
        assert_eq!(sincg(0.0, 7.0), 7.0);
        // near an integer multiple of pi the grating peaks at +-N
        let v: f64 = sincg(PI + 1e-9, 5.0);
        assert!((v - 5.0).abs() < 1e-6, "{v}");
        let v: f64 = sincg(1e-8, 5.0);
        assert!((v - 5.0).abs() < 1e-9);
        // zeros at x = k pi / N
        let z: f64 = sincg(PI / 5.0, 5.0);
        assert!(z.abs() < 1e-12);
    }

    #[test]
    fn sinc3_limits() {
        assert_eq!(sinc3(0.0), 1.0);
        // small-x expansion 1 - x^2/10
        let v: f64 = sinc3(1e-2);
        assert!((v - (1.0 - 1e-4 / 10.0)).abs() < 1e-9, "{v}");
        // first zero of the sphere transform: tan x = x at 4.4934
        let z: f64 = sinc3(4.493409457909064);
        assert!(z.abs() < 1e-12);
    }
}
