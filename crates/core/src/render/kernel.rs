//! The per-pixel physics, written once and generic over the scalar type.
//!
//! [`Kernel`] holds the plan's numbers converted to `R`; [`Kernel::pixel`]
//! computes one pixel exactly as the pixel loop of nanoBragg.c does, in the
//! same order of operations, so the f64 instance reproduces the C program.

use crate::config::CrystalShape;
use crate::physics::lattice::{
    sinc3, sincg, GAUSS_XTAL_WIDTH, ROUND_XTAL_SCALE, TOPHAT_RADIUS_SQR,
};
use crate::physics::polarization_factor;
use crate::real::Real;
use crate::setup::{Interpolation, Plan};
use crate::sf::{polin3, HklGrid};
use crate::vec3::{dot, lift, magnitude, rotate_axis, unitize, V3};
use std::f64::consts::PI;

/// One source as the kernel uses it.
#[derive(Debug, Clone, Copy)]
pub struct KSource<R> {
    /// Incident beam direction (minus the unit vector towards the source).
    pub incident: V3<R>,
    /// Wavelength (m).
    pub lambda: R,
}

/// One rotated cell (phi step × mosaic domain): real-space a, b, c (m).
#[derive(Debug, Clone, Copy)]
pub struct KCell<R> {
    /// a (m).
    pub a: V3<R>,
    /// b (m).
    pub b: V3<R>,
    /// c (m).
    pub c: V3<R>,
}

/// The plan's numbers in the kernel's scalar type.
#[derive(Debug, Clone)]
pub struct Kernel<'p, R: Real> {
    plan: &'p Plan,
    fpixels: usize,
    oversample: usize,
    subpixel: R,
    pixel: R,
    fdet: V3<R>,
    sdet: V3<R>,
    odet: V3<R>,
    pix0: V3<R>,
    beam: V3<R>,
    distance: R,
    close_distance: R,
    thickstep: R,
    thicksteps: usize,
    thick_zero: bool,
    mu: R,
    sources: Vec<KSource<R>>,
    cells: Vec<KCell<R>>,
    a_star: V3<R>,
    b_star: V3<R>,
    c_star: V3<R>,
    na: R,
    nb: R,
    nc: R,
    fudge: R,
    kahn: R,
    polar_axis: V3<R>,
    dmin: R,
    i_bg: R,
    scale: R,
    steps: R,
    default_f: R,
    grid: Option<&'p HklGrid>,
    hkls: usize,
}

/// Per-pixel result.
#[derive(Debug, Clone, Copy)]
pub struct PixelResult<R> {
    /// Photons in the pixel.
    pub value: R,
    /// Sum of the solid angles of all sub-pixel evaluations (for statistics).
    pub omega_sum: f64,
    /// Set when tricubic interpolation ran out of the grid in this pixel:
    /// the (h, k, l) and nearest (h0, k0, l0) of that point.
    pub out_of_range: Option<([f64; 3], [i64; 3])>,
}

impl<'p, R: Real> Kernel<'p, R> {
    /// Convert the plan for this scalar type.
    pub fn new(plan: &'p Plan) -> Self {
        let d = &plan.detector;
        Kernel {
            plan,
            fpixels: d.fpixels,
            oversample: plan.oversample,
            subpixel: R::c(d.pixel_size_m / plan.oversample as f64),
            pixel: R::c(d.pixel_size_m),
            fdet: lift(d.fdet),
            sdet: lift(d.sdet),
            odet: lift(d.odet),
            pix0: lift(d.pix0),
            beam: lift(d.beam),
            distance: R::c(d.distance_m),
            close_distance: R::c(d.close_distance_m),
            thickstep: R::c(d.thickstep_m),
            thicksteps: d.thicksteps,
            thick_zero: d.thick_m == 0.0,
            mu: R::c(d.mu_per_m),
            sources: plan
                .sources
                .list
                .iter()
                .map(|s| KSource {
                    incident: lift([-s.dir[0], -s.dir[1], -s.dir[2]]),
                    lambda: R::c(s.lambda_m),
                })
                .collect(),
            cells: plan
                .cells_m
                .iter()
                .map(|m| KCell {
                    a: lift([m[0], m[1], m[2]]),
                    b: lift([m[3], m[4], m[5]]),
                    c: lift([m[6], m[7], m[8]]),
                })
                .collect(),
            a_star: lift(plan.cell.a_star),
            b_star: lift(plan.cell.b_star),
            c_star: lift(plan.cell.c_star),
            na: R::c(plan.n_cells[0]),
            nb: R::c(plan.n_cells[1]),
            nc: R::c(plan.n_cells[2]),
            fudge: R::c(plan.fudge),
            kahn: R::c(plan.kahn_factor),
            polar_axis: lift(d.polar),
            dmin: R::c(plan.dmin_m),
            i_bg: R::c(plan.i_bg),
            scale: R::c(crate::units::R_E_SQR * plan.fluence),
            steps: R::c(plan.steps as f64),
            default_f: R::c(plan.default_f),
            grid: plan.grid.as_ref(),
            hkls: plan.hkls,
        }
    }

    /// Nearest-neighbour structure factor, or `default_F` off the grid.
    #[inline(always)]
    fn f_nearest(&self, h0: i64, k0: i64, l0: i64) -> R {
        if let Some(g) = self.grid {
            if self.hkls > 0
                && h0 <= g.h_max as i64
                && h0 >= g.h_min as i64
                && k0 <= g.k_max as i64
                && k0 >= g.k_min as i64
                && l0 <= g.l_max as i64
                && l0 >= g.l_min as i64
            {
                return R::c(g.at(
                    (h0 - g.h_min as i64) as i32,
                    (k0 - g.k_min as i64) as i32,
                    (l0 - g.l_min as i64) as i32,
                ));
            }
        }
        self.default_f
    }

    /// Compute one pixel. `interpolate` is the running tricubic flag: it starts
    /// as the plan's choice and is cleared at the first out-of-range point, as
    /// the shared flag of nanoBragg.c is.
    #[inline(never)]
    pub fn pixel(&self, fpixel: usize, spixel: usize, interpolate: &mut bool) -> PixelResult<R> {
        let plan = self.plan;
        let zero = R::zero();
        let mut out_of_range = None;
        let mut omega_sum = 0.0f64;
        let mut i_acc = self.i_bg;
        let mut polar = if plan.nopolar { R::one() } else { zero };
        let mut omega_pixel = zero;
        let mut capture_fraction = zero;
        let os = self.oversample;
        let half = R::c(0.5);
        for thick_tic in 0..self.thicksteps {
            let odet_pos = R::c(thick_tic as f64) * self.thickstep;
            capture_fraction = if self.thick_zero { R::one() } else { zero };
            for sub_s in 0..os {
                for sub_f in 0..os {
                    let fdet_pos = self.subpixel * R::c((fpixel * os + sub_f) as f64)
                        + self.subpixel / R::c(2.0);
                    let sdet_pos = self.subpixel * R::c((spixel * os + sub_s) as f64)
                        + self.subpixel / R::c(2.0);
                    let mut pos: V3<R> = std::array::from_fn(|i| {
                        fdet_pos * self.fdet[i]
                            + sdet_pos * self.sdet[i]
                            + odet_pos * self.odet[i]
                            + self.pix0[i]
                    });
                    if plan.detector.curved {
                        let v = [
                            self.distance * self.beam[0],
                            self.distance * self.beam[1],
                            self.distance * self.beam[2],
                        ];
                        let nv = rotate_axis(v, self.sdet, pos[1] / self.distance);
                        pos = rotate_axis(nv, self.fdet, pos[2] / self.distance);
                    }
                    let (mut diffracted, airpath) = unitize(pos);
                    if omega_pixel == zero || plan.oversample_omega {
                        omega_pixel = self.pixel * self.pixel / airpath / airpath
                            * self.close_distance
                            / airpath;
                        if plan.detector.point_pixel {
                            omega_pixel = R::one() / airpath / airpath;
                        }
                    }
                    omega_sum += omega_pixel.val();
                    if capture_fraction == zero || plan.oversample_thick {
                        let parallax = dot(diffracted, self.odet);
                        let t = R::c(thick_tic as f64);
                        capture_fraction = (-t * self.thickstep * self.mu / parallax).exp()
                            - (-(t + R::one()) * self.thickstep * self.mu / parallax).exp();
                    }
                    for src in &self.sources {
                        let incident = src.incident;
                        let lambda = src.lambda;
                        let scattering = [
                            (diffracted[0] - incident[0]) / lambda,
                            (diffracted[1] - incident[1]) / lambda,
                            (diffracted[2] - incident[2]) / lambda,
                        ];
                        let stol = half * magnitude(scattering);
                        if self.dmin > zero && stol > zero && self.dmin > half / stol {
                            continue;
                        }
                        if polar == zero || plan.oversample_polar {
                            polar = polarization_factor(
                                self.kahn,
                                incident,
                                diffracted,
                                self.polar_axis,
                            );
                            diffracted = unitize(diffracted).0;
                        }
                        for cell in &self.cells {
                            let h = dot(cell.a, scattering);
                            let k = dot(cell.b, scattering);
                            let l = dot(cell.c, scattering);
                            let h0 = (h.val() - 0.5).ceil();
                            let k0 = (k.val() - 0.5).ceil();
                            let l0 = (l.val() - 0.5).ceil();
                            let f_latt = self.lattice(h, k, l, h0, k0, l0);
                            if f_latt == zero && plan.water_size_m == 0.0 {
                                continue;
                            }
                            let f_cell = self.structure_factor(
                                h,
                                k,
                                l,
                                [h0 as i64, k0 as i64, l0 as i64],
                                interpolate,
                                &mut out_of_range,
                            );
                            i_acc += f_cell * f_cell * f_latt * f_latt;
                            if plan.oversample_thick {
                                i_acc *= capture_fraction;
                            }
                            if plan.oversample_polar {
                                i_acc *= polar;
                            }
                            if plan.oversample_omega {
                                i_acc *= omega_pixel;
                            }
                        }
                    }
                }
            }
        }
        let mut value = self.scale * i_acc / self.steps;
        if !plan.oversample_thick {
            value *= capture_fraction;
        }
        if !plan.oversample_polar {
            value *= polar;
        }
        if !plan.oversample_omega {
            value *= omega_pixel;
        }
        PixelResult { value, omega_sum, out_of_range }
    }

    #[inline(always)]
    fn lattice(&self, h: R, k: R, l: R, h0: f64, k0: f64, l0: f64) -> R {
        let pi = R::c(PI);
        match self.plan.shape {
            CrystalShape::Square => {
                let mut f = R::one();
                if self.na > R::one() {
                    f *= sincg(pi * h, self.na);
                }
                if self.nb > R::one() {
                    f *= sincg(pi * k, self.nb);
                }
                if self.nc > R::one() {
                    f *= sincg(pi * l, self.nc);
                }
                f
            }
            CrystalShape::Round => {
                let dh = h - R::c(h0);
                let dk = k - R::c(k0);
                let dl = l - R::c(l0);
                let hrad_sqr = dh * dh * self.na * self.na
                    + dk * dk * self.nb * self.nb
                    + dl * dl * self.nc * self.nc;
                self.na
                    * self.nb
                    * self.nc
                    * R::c(ROUND_XTAL_SCALE)
                    * sinc3(R::c(PI) * (hrad_sqr * self.fudge).sqrt())
            }
            CrystalShape::Gauss | CrystalShape::Tophat => {
                let dh = h - R::c(h0);
                let dk = k - R::c(k0);
                let dl = l - R::c(l0);
                let dx = dh * self.a_star[0] + dk * self.b_star[0] + dl * self.c_star[0];
                let dy = dh * self.a_star[1] + dk * self.b_star[1] + dl * self.c_star[1];
                let dz = dh * self.a_star[2] + dk * self.b_star[2] + dl * self.c_star[2];
                let rad_star_sqr = (dx * dx + dy * dy + dz * dz)
                    * self.na
                    * self.na
                    * self.nb
                    * self.nb
                    * self.nc
                    * self.nc;
                if self.plan.shape == CrystalShape::Gauss {
                    self.na
                        * self.nb
                        * self.nc
                        * (-(rad_star_sqr / R::c(GAUSS_XTAL_WIDTH) * self.fudge)).exp()
                } else {
                    let inside = (rad_star_sqr * self.fudge).val() < TOPHAT_RADIUS_SQR;
                    self.na * self.nb * self.nc * if inside { R::one() } else { R::zero() }
                }
            }
        }
    }

    #[inline(always)]
    fn structure_factor(
        &self,
        h: R,
        k: R,
        l: R,
        hkl0: [i64; 3],
        interpolate: &mut bool,
        out_of_range: &mut Option<([f64; 3], [i64; 3])>,
    ) -> R {
        if *interpolate {
            if let Some(g) = self.grid {
                let (hv, kv, lv) = (h.val(), k.val(), l.val());
                let (hmin, kmin, lmin) = (g.h_min as f64, g.k_min as f64, g.l_min as f64);
                if (hv - hmin + 3.0) > g.h_range() as f64
                    || (hv - 2.0 < hmin)
                    || (kv - kmin + 3.0) > g.k_range() as f64
                    || (kv - 2.0 < kmin)
                    || (lv - lmin + 3.0) > g.l_range() as f64
                    || (lv - 2.0 < lmin)
                {
                    if out_of_range.is_none() {
                        *out_of_range = Some(([hv, kv, lv], hkl0));
                    }
                    *interpolate = false;
                } else {
                    let hf = hv.floor() as i32;
                    let kf = kv.floor() as i32;
                    let lf = lv.floor() as i32;
                    let xa = [(hf - 1) as f64, hf as f64, (hf + 1) as f64, (hf + 2) as f64];
                    let ya = [(kf - 1) as f64, kf as f64, (kf + 1) as f64, (kf + 2) as f64];
                    let za = [(lf - 1) as f64, lf as f64, (lf + 1) as f64, (lf + 2) as f64];
                    let mut sub = [[[0.0f64; 4]; 4]; 4];
                    for (i1, plane) in sub.iter_mut().enumerate() {
                        for (i2, row) in plane.iter_mut().enumerate() {
                            for (i3, v) in row.iter_mut().enumerate() {
                                *v = g.at(
                                    hf - 1 + i1 as i32 - g.h_min,
                                    kf - 1 + i2 as i32 - g.k_min,
                                    lf - 1 + i3 as i32 - g.l_min,
                                );
                            }
                        }
                    }
                    return polin3(&xa, &ya, &za, &sub, h, k, l);
                }
            } else {
                *interpolate = false;
            }
        }
        self.f_nearest(hkl0[0], hkl0[1], hkl0[2])
    }

    /// Pixels along the fast axis.
    pub fn fpixels(&self) -> usize {
        self.fpixels
    }

    /// Whether the plan starts with tricubic interpolation on.
    pub fn interpolates(&self) -> bool {
        self.plan.interpolation == Interpolation::Tricubic
    }
}
