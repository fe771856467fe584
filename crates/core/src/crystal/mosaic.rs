//! Random rotations for mosaic domains and random crystal orientations.

use crate::real::Real;
use crate::rng::Ran1;
use std::f64::consts::PI;

/// A random rotation on a spherical cap: port of nanoBragg.c's
/// `mosaic_rotation_umat`.
///
/// Three uniform deviates pick a rotation axis uniformly on the unit sphere and
/// an angle `mosaicity * (1 - r^2)^(1/3)` (radians, `r` uniform on [-1, 1]),
/// at most `mosaicity`. The C program passes
/// 90.0 for a random crystal orientation (`-misset random`): the angle then
/// wraps around many times. The angle is computed in `f32` as in C (a `float`
/// argument times `powf`). Returns the row-major
/// rotation matrix `[uxx, uxy, uxz, uyx, uyy, uyz, uzx, uzy, uzz]`.
pub fn mosaic_rotation_umat(mosaicity: f32, rng: &mut Ran1) -> [f64; 9] {
    let (axis, rot) = draw_rotation(mosaicity, rng);
    rodrigues(axis, rot)
}

/// The draws of [`mosaic_rotation_umat`]: the rotation axis and the angle,
/// with the factor `(1 - r^2)^(1/3)` the angle is `mosaicity` times.
fn draw_rotation(mosaicity: f32, rng: &mut Ran1) -> ([f64; 3], f64) {
    // Three uniform deviates on [-1, 1], drawn in this order.
    let r1 = 2.0 * rng.ran1() as f64 - 1.0;
    let r2 = 2.0 * rng.ran1() as f64 - 1.0;
    let r3 = 2.0 * rng.ran1() as f64 - 1.0;

    let xyrad = (1.0 - r2 * r2).sqrt();
    let rot = (mosaicity * ((1.0 - r3 * r3) as f32).powf((1.0f64 / 3.0) as f32)) as f64;

    // Rotation axis.
    let v1 = xyrad * (PI * r1).sin();
    let v2 = xyrad * (PI * r1).cos();
    let v3 = r2;
    ([v1, v2, v3], rot)
}

/// Rodrigues' formula, with the same intermediate products as the C code.
fn rodrigues<R: Real>(v: [f64; 3], rot: R) -> [R; 9] {
    let [v1, v2, v3] = v.map(R::c);
    let c = rot.cos();
    let omc = R::one() - c;
    let s = rot.sin();
    let omc_v1 = omc * v1;
    let omc_v1v2 = omc_v1 * v2;
    let s_v3 = s * v3;
    let omc_v1v3 = omc_v1 * v3;
    let s_v2 = s * v2;
    let omc_v2v3 = omc * v2 * v3;
    let s_v1 = s * v1;

    [
        c + omc * (v1 * v1),
        omc_v1v2 - s_v3,
        omc_v1v3 + s_v2,
        omc_v1v2 + s_v3,
        c + omc * (v2 * v2),
        omc_v2v3 - s_v1,
        omc_v1v3 - s_v2,
        omc_v2v3 + s_v1,
        c + omc * (v3 * v3),
    ]
}

/// Cross product `a × b` normalised to unit length (left alone if zero).
fn unit_cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    let mut c = [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
    let m = (c[0] * c[0] + c[1] * c[1] + c[2] * c[2]).sqrt();
    if m > 0.0 {
        for x in &mut c {
            *x /= m;
        }
    }
    c
}

/// Length of a row.
fn norm(r: [f64; 3]) -> f64 {
    (r[0] * r[0] + r[1] * r[1] + r[2] * r[2]).sqrt()
}

/// Divide a row by `m` when `m > 0`.
fn scale_down(r: &mut [f64; 3], m: f64) {
    if m > 0.0 {
        for x in r {
            *x /= m;
        }
    }
}

/// Misseting angles of a rotation matrix: port of nanoBragg.c's `umat2misset`.
///
/// The rows are normalised, empty rows are rebuilt from cross products of the
/// others, and the result is decomposed as rotations about x, then y, then z.
/// Returns `[rotx, roty, rotz]` in radians (C's `missets[1..=3]`).
pub fn umat2misset(umat: &[f64; 9]) -> [f64; 3] {
    let mut x = [umat[0], umat[1], umat[2]];
    let mut y = [umat[3], umat[4], umat[5]];
    let mut z = [umat[6], umat[7], umat[8]];

    let (mx, my, mz) = (norm(x), norm(y), norm(z));
    scale_down(&mut x, mx);
    scale_down(&mut y, my);
    scale_down(&mut z, mz);

    // With two empty rows, the empty ones become unit axes.
    if mx >= 0.0 && my <= 0.0 && mz <= 0.0 {
        y = [0.0, 1.0, 0.0];
        z = [0.0, 0.0, 1.0];
    }
    if mx <= 0.0 && my >= 0.0 && mz <= 0.0 {
        x = [1.0, 0.0, 0.0];
        z = [0.0, 0.0, 1.0];
    }
    if mx <= 0.0 && my <= 0.0 && mz >= 0.0 {
        x = [1.0, 0.0, 0.0];
        y = [0.0, 1.0, 0.0];
    }

    // Twice: replace a remaining empty row with the cross product of the others.
    for _ in 0..2 {
        let xcy = unit_cross(x, y);
        let ycz = unit_cross(y, z);
        let zcx = unit_cross(z, x);
        if mx <= 0.0 {
            x = ycz;
        }
        if my <= 0.0 {
            y = zcx;
        }
        if mz <= 0.0 {
            z = xcy;
        }
    }

    let (mx, my, mz) = (norm(x), norm(y), norm(z));
    scale_down(&mut x, mx);
    scale_down(&mut y, my);
    scale_down(&mut z, mz);

    let [uxx, uxy, _] = x;
    let [uyx, uyy, _] = y;
    let [uzx, uzy, uzz] = z;
    if uzx * uzx < 1.0 {
        [uzy.atan2(uzz), (-uzx).atan2((uzy * uzy + uzz * uzz).sqrt()), uyx.atan2(uxx)]
    } else {
        // Gimbal lock: C's fixed choice of angles.
        let quarter = 1.0f64.atan2(1.0);
        [quarter * 4.0, quarter * 2.0, uxy.atan2(-uyy)]
    }
}

/// The orientation matrices of `domains` mosaic domains spread over
/// `spread_rad`, as nanoBragg.c's `main` builds them: each domain draws a
/// [`mosaic_rotation_umat`] (with the spread rounded to `f32`), and domain 0 is
/// then forced to the identity (its random numbers are still consumed).
pub fn mosaic_umats(spread_rad: f64, domains: usize, rng: &mut Ran1) -> Vec<[f64; 9]> {
    mosaic_umats_in(spread_rad, domains, rng)
}

/// [`mosaic_umats`] in any number type: each domain keeps its seeded axis and
/// angle factor, and the angle carries the spread's derivatives (its value is
/// the f32 product of [`mosaic_umats`]).
pub fn mosaic_umats_in<R: Real>(spread_rad: R, domains: usize, rng: &mut Ran1) -> Vec<[R; 9]> {
    let spread = spread_rad.val();
    let moved = spread_rad - R::c(spread);
    let mut out: Vec<[R; 9]> = (0..domains)
        .map(|_| {
            let (axis, rot) = draw_rotation(spread as f32, rng);
            let factor = if spread != 0.0 { rot / spread } else { 0.0 };
            rodrigues(axis, R::c(rot) + moved * R::c(factor))
        })
        .collect();
    if let Some(first) = out.first_mut() {
        *first = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0].map(R::c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mosaic_rotation_umat(0.8° in rad, seed 4242)` twelve times, from the C program.
    const MOSAIC_4242: [[u64; 9]; 12] = [
        [
            0x3fefff4d62387e9c,
            0xbf6034ec60e74ff4,
            0xbf8a6b880611e0e4,
            0x3f601b0a0df6afc0,
            0x3feffffaf631dd5d,
            0xbf4fc39b9d3038c8,
            0x3f8a6c8542911516,
            0x3f4eee28dfd1e2c8,
            0x3fefff5080ae6add,
        ],
        [
            0x3fefffb6a3b7db42,
            0xbf3e9f384bc3818e,
            0x3f811a6e5e865636,
            0x3f4095c894db1ce3,
            0x3fefffe903ce5d23,
            0xbf73108f2f7dd808,
            0xbf81193e2f6ee70e,
            0x3f7314d21d779322,
            0x3fefffa026b275ac,
        ],
        [
            0x3fefffcecea5517b,
            0xbf71cd0dd95c2261,
            0xbf75af20fe7700d3,
            0x3f71896ad940d1d3,
            0x3fefff525a286319,
            0xbf88da66613b0d0c,
            0x3f75e5f8745fc5d7,
            0x3f88ce5e04c5a820,
            0x3fefff482f5b61c8,
        ],
        [
            0x3fefff573d90afbf,
            0x3f7d478384789dcd,
            0x3f8576b59d26b0c6,
            0xbf7d75e38d827a8f,
            0x3fefffb75be6a050,
            0x3f7127d5c4b0fff9,
            0xbf8566d2735e029a,
            0xbf717685e84f5c41,
            0x3fefff7a6da9ddb8,
        ],
        [
            0x3fefff48716a1b2c,
            0x3f49a0b266e57bce,
            0x3f8b0c753cd8c181,
            0xbf4b76f21924111c,
            0x3fefffec6ad19c71,
            0x3f715d63a1b6553e,
            0xbf8b0aa7aa26f37f,
            0xbf71689b8d045e5c,
            0x3fefff363c999bc1,
        ],
        [
            0x3fefffbb7d536893,
            0x3f6cf74136d29f2d,
            0xbf7dc5ba53f1e90c,
            0xbf6c53c6d51dbc15,
            0x3fefff7b3313992a,
            0x3f85eeb60af16baa,
            0x3f7decf372bb3246,
            0xbf85e1599bad4afa,
            0x3fefff5055b1af6b,
        ],
        [
            0x3fefff4efac3877b,
            0x3f738c8613195589,
            0x3f88bfbcf25a1fce,
            0xbf73bf100cc3cba7,
            0x3fefffd72a915e22,
            0x3f703ae60aff261b,
            0xbf88b5b31f56d426,
            0xbf7077a2b6b48153,
            0x3fefff5666d76f7a,
        ],
        [
            0x3fefff60f1484b62,
            0xbf881c4eb6404d93,
            0xbf6da24f56866434,
            0x3f881096a81eea3f,
            0x3fefff47b0d2da11,
            0xbf792593a954d698,
            0x3f6e393813c3cf36,
            0x3f78f8847ab42e60,
            0x3fefffcac15a7a23,
        ],
        [
            0x3fefff5aa36cd380,
            0x3f7260be3ab66079,
            0xbf88053e56f12f23,
            0xbf72aaf1473b82f7,
            0x3fefffc44cee11ee,
            0xbf78a19320b0e2bf,
            0x3f87f6ec2cf32447,
            0x3f78d920e874a009,
            0x3fefff49d3ed79f8,
        ],
        [
            0x3fefffca5974fcac,
            0x3f7d337725b2d888,
            0x3f43186be55ad939,
            0xbf7d3a3d15319186,
            0x3fefff34ad8e8a7a,
            0x3f887d0f043b18e6,
            0xbf404cdb8e0667a7,
            0xbf887f1411f6ede2,
            0x3fefff69b77c6822,
        ],
        [
            0x3fefffb1cebf21dc,
            0x3f6836bd48741451,
            0xbf809de951a954ce,
            0xbf68aa3955b99223,
            0x3fefffc63f4debeb,
            0xbf7bc8a8cc9bc0a5,
            0x3f809348518a9cf8,
            0x3f7be2029011d1b3,
            0x3fefff8ab87652a5,
        ],
        [
            0x3fefff6e240d9190,
            0xbf86b08a5c3dbd47,
            0xbf709094f58e2e20,
            0x3f86ae0a8211ee81,
            0x3fefff7de4d57eb7,
            0xbf53a642832945d0,
            0x3f709e40513eaaae,
            0x3f52ea1112886ce2,
            0x3fefffed579c4bf6,
        ],
    ];

    fn deg_to_rad(deg: f64) -> f64 {
        // nanoBragg.c divides by RTD = 180/π written as 180 * (1/π).
        deg / (180.0 * std::f64::consts::FRAC_1_PI)
    }

    fn to_bits(m: &[f64; 9]) -> [u64; 9] {
        m.map(f64::to_bits)
    }

    #[test]
    fn rotation_umat_matches_c() {
        let mut r = Ran1::new(-4242);
        let spread = deg_to_rad(0.8) as f32;
        for (i, want) in MOSAIC_4242.iter().enumerate() {
            let got = mosaic_rotation_umat(spread, &mut r);
            assert_eq!(to_bits(&got), *want, "matrix {i}");
        }
        assert_eq!(r.idum, 384806398);
    }

    #[test]
    fn mosaic_umats_forces_first_to_identity() {
        let mut r = Ran1::new(-4242);
        let m = mosaic_umats(deg_to_rad(0.8), 12, &mut r);
        assert_eq!(m.len(), 12);
        assert_eq!(m[0], [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]);
        for i in 1..12 {
            assert_eq!(to_bits(&m[i]), MOSAIC_4242[i], "domain {i}");
        }
        assert_eq!(r.idum, 384806398);
        assert!(mosaic_umats(0.1, 0, &mut r).is_empty());
    }

    #[test]
    fn random_misset_matches_c() {
        let want: [[u64; 3]; 5] = [
            [0x3ffd85d67db64ea7, 0xbfe3853f66914908, 0xbffb51475231c1b3],
            [0xbff5e863d6b5273e, 0x3fe3cc18083d78dc, 0xbffc27b605b38543],
            [0xc0074748277fe4e7, 0xbfd15549763f0c69, 0xc000c1006b55da35],
            [0xbfea91d5a382c4a1, 0x3fe6ec253addc2eb, 0x4002864fedcfe5be],
            [0x40049507173e6825, 0xbff303549836f4ad, 0x4008d2d8de560f39],
        ];
        let mut r = Ran1::new(-12345);
        for (i, w) in want.iter().enumerate() {
            let u = mosaic_rotation_umat(90.0, &mut r);
            assert_eq!(umat2misset(&u).map(f64::to_bits), *w, "draw {i}");
        }
    }

    #[test]
    fn umat2misset_degenerate_matrices_match_c() {
        let mats: [[f64; 9]; 7] = [
            [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            [2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            [0.0; 9],
            [0.0, 0.0, -1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0],
            [0.3, 0.1, -0.2, 0.5, 2.0, 0.1, -0.7, 0.2, 0.9],
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0],
        ];
        let want: [[u64; 3]; 7] = [
            [0x0000000000000000, 0x8000000000000000, 0x0000000000000000],
            [0x0000000000000000, 0x8000000000000000, 0x0000000000000000],
            [0x0000000000000000, 0x8000000000000000, 0x0000000000000000],
            [0x0000000000000000, 0x8000000000000000, 0x0000000000000000],
            [0x400921fb54442d18, 0x3ff921fb54442d18, 0x400921fb54442d18],
            [0x3fcbfd581196f5c2, 0x3fe4c7e0899ab77e, 0x3fd2c75f8ae2a2a1],
            [0x3fe2d0ead6066395, 0xbfd150aff3fbbed4, 0xbfc639ffeeedf541],
        ];
        for (i, (m, w)) in mats.iter().zip(want.iter()).enumerate() {
            assert_eq!(umat2misset(m).map(f64::to_bits), *w, "matrix {i}");
        }
    }
}
