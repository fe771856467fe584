//! Four-point (cubic) Lagrange interpolation in one, two and three dimensions,
//! as nanoBragg.c uses it for tricubic interpolation of structure factors.
//!
//! The abscissae are plain `f64` grid coordinates; the query point and the
//! result are generic over [`Real`] so the same code serves `f64` (bit-identical
//! to C: every product and quotient is formed in the C order), `f32` and dual
//! numbers.

use crate::real::Real;

/// Cubic Lagrange interpolation through `(xa[i], ya[i])` evaluated at `x`:
/// port of nanoBragg.c's `polint`.
///
/// Each term is `(x - xa[j])(x - xa[k])(x - xa[l]) * ya[i] / ((xa[i] - xa[j])(xa[i] - xa[k])(xa[i] - xa[l]))`,
/// with products taken left to right, and the four terms are summed in order.
#[inline]
pub fn polint<R: Real>(xa: &[f64; 4], ya: &[R; 4], x: R) -> R {
    let d0 = x - R::c(xa[0]);
    let d1 = x - R::c(xa[1]);
    let d2 = x - R::c(xa[2]);
    let d3 = x - R::c(xa[3]);
    let x0 = d1 * d2 * d3 * ya[0] / R::c((xa[0] - xa[1]) * (xa[0] - xa[2]) * (xa[0] - xa[3]));
    let x1 = d0 * d2 * d3 * ya[1] / R::c((xa[1] - xa[0]) * (xa[1] - xa[2]) * (xa[1] - xa[3]));
    let x2 = d0 * d1 * d3 * ya[2] / R::c((xa[2] - xa[0]) * (xa[2] - xa[1]) * (xa[2] - xa[3]));
    let x3 = d0 * d1 * d2 * ya[3] / R::c((xa[3] - xa[0]) * (xa[3] - xa[1]) * (xa[3] - xa[2]));
    x0 + x1 + x2 + x3
}

/// Bicubic interpolation of `ya[i][j]` given at `(x1a[i], x2a[j])`, evaluated
/// at `(x1, x2)`: port of nanoBragg.c's `polin2` (interpolate each row along
/// the second axis, then the four results along the first).
#[inline]
pub fn polin2<R: Real>(x1a: &[f64; 4], x2a: &[f64; 4], ya: &[[f64; 4]; 4], x1: R, x2: R) -> R {
    let row = |j: usize| polint(x2a, &ya[j].map(R::c), x2);
    let ymtmp = [row(0), row(1), row(2), row(3)];
    polint(x1a, &ymtmp, x1)
}

/// Tricubic interpolation of `values[i][j][k]` given at `(xa[i], ya[j], za[k])`,
/// evaluated at `(x, y, z)`: port of nanoBragg.c's `polin3` (a [`polin2`] over
/// the second and third axes for each of the four planes, then [`polint`] along
/// the first).
#[inline]
pub fn polin3<R: Real>(
    xa: &[f64; 4],
    ya: &[f64; 4],
    za: &[f64; 4],
    values: &[[[f64; 4]; 4]; 4],
    x: R,
    y: R,
    z: R,
) -> R {
    let plane = |j: usize| polin2(ya, za, &values[j], y, z);
    let ymtmp = [plane(0), plane(1), plane(2), plane(3)];
    polint(xa, &ymtmp, x)
}

/// The weights of [`polin3`]: `polin3(xa, ya, za, values, x, y, z) =
/// Σ w[i][j][k] values[i][j][k]` (to rounding). Nested four-point
/// interpolation is linear in the values, with the tensor product of the
/// one-dimensional Lagrange weights ([`lagrange4`]) as coefficients: the
/// derivative of the interpolated structure factor by each grid value.
pub fn polin3_weights(
    xa: &[f64; 4],
    ya: &[f64; 4],
    za: &[f64; 4],
    x: f64,
    y: f64,
    z: f64,
) -> [[[f64; 4]; 4]; 4] {
    let (wx, wy, wz) = (lagrange4(xa, x), lagrange4(ya, y), lagrange4(za, z));
    std::array::from_fn(|i| std::array::from_fn(|j| std::array::from_fn(|k| wx[i] * wy[j] * wz[k])))
}

/// The four Lagrange basis polynomials of the nodes `xa` at `x` (the
/// weights of [`polint`]).
pub fn lagrange4(xa: &[f64; 4], x: f64) -> [f64; 4] {
    std::array::from_fn(|i| {
        (0..4).filter(|&j| j != i).map(|j| (x - xa[j]) / (xa[i] - xa[j])).product()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Ran1;

    /// A cubic in each variable separately (so within the tricubic space).
    fn cubic(x: f64, y: f64, z: f64) -> f64 {
        0.5 + 1.5 * x - 0.25 * x * x * x + 2.0 * y * y - 0.125 * y * y * y + 0.3 * z * z * z
            - 0.7 * x * y * z
            + 0.01 * x * x * x * y * y * y * z * z * z
            - 1.1 * x * z * z
    }

    #[test]
    fn reproduces_a_tricubic_polynomial() {
        let xa = [-3.0, -2.0, -1.0, 0.0];
        let ya = [4.0, 5.0, 6.0, 7.0];
        let za = [-1.0, 0.0, 1.0, 2.0];
        let mut v = [[[0.0; 4]; 4]; 4];
        for i in 0..4 {
            for j in 0..4 {
                for k in 0..4 {
                    v[i][j][k] = cubic(xa[i], ya[j], za[k]);
                }
            }
        }
        for &(x, y, z) in
            &[(-2.3, 5.6, 0.2), (-1.01, 4.5, 1.99), (-2.0, 6.0, 0.0), (-0.2, 6.7, -0.5)]
        {
            let want = cubic(x, y, z);
            let got = polin3(&xa, &ya, &za, &v, x, y, z);
            assert!((got - want).abs() <= 1e-12 * want.abs().max(1.0), "{got} vs {want}");
            let got32 = polin3(&xa, &ya, &za, &v, x as f32, y as f32, z as f32);
            assert!((got32 as f64 - want).abs() <= 1e-3 * want.abs().max(1.0));
        }
        // The 1D and 2D versions on a slice.
        let x = -1.7;
        let line = [v[0][1][2], v[1][1][2], v[2][1][2], v[3][1][2]];
        let want = cubic(x, ya[1], za[2]);
        assert!((polint(&xa, &line, x) - want).abs() <= 1e-12 * want.abs().max(1.0));
        let want = cubic(xa[2], 4.4, 1.3);
        assert!((polin2(&ya, &za, &v[2], 4.4, 1.3) - want).abs() <= 1e-12 * want.abs().max(1.0));
    }

    /// Random grids and points generated with `ran1(-777)`, compared bit for bit
    /// with the C functions run on the same inputs.
    #[test]
    fn matches_c_bitwise() {
        let want: [[u64; 3]; 10] = [
            [0x40855f64b2cc8cb8, 0x4087b42849dbb6bd, 0x408d1d5f15105e0c],
            [0x407ed59b9df3c556, 0x407b86aad0264dbe, 0x4079e74af466b576],
            [0x4082f39cd3debcb7, 0x40781ef2320725e2, 0x408173e0ea48c3ea],
            [0x40801a09e2bf21f2, 0x40893f52ac589580, 0x405c67bc4456e8e2],
            [0x40890ef4b641593c, 0x4082ebcf29859cf2, 0x40851545de852f6d],
            [0x408b54d79fae4ec2, 0x4079c5c1a442da59, 0x4074c344211637e8],
            [0x407032bfabf58812, 0x4078939284e9043d, 0x4079d680ffd38a95],
            [0x4084739f7bf3c15b, 0x408786af07aac59b, 0x406c73ff8baecdde],
            [0x4085d0d8230c21d0, 0x407bbb07abf40526, 0x408a44ff0ad55c12],
            [0x407fb9a7b65e5589, 0x4083eab75b134b48, 0x407787843ae21bc5],
        ];
        let mut r = Ran1::new(-777);
        for w in want {
            let mut axis = || {
                let b = (r.ran1() * 20.0) as i32 - 10;
                [0, 1, 2, 3].map(|i| (b + i - 1) as f64)
            };
            let (xa, ya, za) = (axis(), axis(), axis());
            let mut v = [[[0.0; 4]; 4]; 4];
            for plane in v.iter_mut() {
                for row in plane.iter_mut() {
                    for val in row.iter_mut() {
                        *val = 1000.0 * r.ran1() as f64;
                    }
                }
            }
            let x = xa[1] + r.ran1() as f64;
            let y = ya[1] + r.ran1() as f64;
            let z = za[1] + r.ran1() as f64;
            let out3 = polin3(&xa, &ya, &za, &v, x, y, z);
            let out2 = polin2(&xa, &ya, &v[0], x, y);
            let out1 = polint(&xa, &v[0][0], x);
            assert_eq!([out3.to_bits(), out2.to_bits(), out1.to_bits()], w);
        }
    }

    #[test]
    fn polin3_weights_reproduce_polin3() {
        let mut rng = Ran1::new(-7);
        let axis = |x: f64| [x - 1.0, x, x + 1.0, x + 2.0];
        let values: [[[f64; 4]; 4]; 4] = std::array::from_fn(|_| {
            std::array::from_fn(|_| std::array::from_fn(|_| 100.0 * rng.ran1() as f64 - 20.0))
        });
        for _ in 0..20 {
            let mut r = || rng.ran1() as f64;
            let (x, y, z) = (3.0 + r(), -2.0 + r(), 7.0 + r());
            let (xa, ya, za) = (axis(x.floor()), axis(y.floor()), axis(z.floor()));
            let want = polin3(&xa, &ya, &za, &values, x, y, z);
            let w = polin3_weights(&xa, &ya, &za, x, y, z);
            let mut got = 0.0;
            for i in 0..4 {
                for j in 0..4 {
                    for k in 0..4 {
                        got += w[i][j][k] * values[i][j][k];
                    }
                }
            }
            assert!((got - want).abs() <= 1e-12 * want.abs().max(1.0), "{got} vs {want}");
        }
    }
}
