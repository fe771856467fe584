//! Configuration → resolved plan.
//!
//! [`Plan::new`] runs every step of nanoBragg.c's setup that does not depend on
//! the pixel, once: detector basis and origin, sources, phi × mosaic rotated
//! cell vectors, structure factor grid, scale factors. Kernels only read it.

mod leaves;

pub use leaves::{LeafSource, Leaves};

use crate::amorphous::{
    AmorphousDetector, AmorphousSample, AmorphousSensor, AmorphousSource, Background, StolTable,
};
use crate::config::{AmorphousConfig, CrystalShape, SfSource, SimConfig};
use crate::crystal::cell::Cell;
use crate::error::{Error, Result, Warning};
use crate::geometry::Detector;
use crate::param::{Deltas, Param};
use crate::real::{DiffReal, Real};
use crate::rng::Ran1;
use crate::sf::HklGrid;
use crate::source::{SourceIn, Sources};
use crate::units::{AVOGADRO, RTD, R_E_SQR, WATER_F, WATER_MW};
use crate::vec3::{lift, rotate_axis, rotate_umat, V3};
use std::sync::Arc;

/// How structure factors are looked up between grid points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interpolation {
    /// Nearest grid point (or `default_F` outside the grid).
    Nearest,
    /// Tricubic interpolation, falling back to nearest-neighbour after the
    /// first out-of-range point as nanoBragg.c does.
    Tricubic,
}

/// Seeds for the random draws made during setup.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SetupSeeds {
    /// Seed for `-misset random` as nanoBragg.c stores it (minus the flag value).
    pub misset_idum: i64,
}

/// Everything the render kernels need, resolved once, in SI units.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Resolved detector.
    pub detector: Detector,
    /// Resolved sources.
    pub sources: Sources,
    /// Resolved cell (phi = 0, no mosaic).
    pub cell: Cell,
    /// Central wavelength (m).
    pub lambda0_m: f64,
    /// Fluence (photons/m²) after `-flux` conversion.
    pub fluence: f64,
    /// Flux (photons/s) made consistent with the fluence.
    pub flux: f64,
    /// Beam size (m).
    pub beamsize_m: f64,
    /// Exposure (s).
    pub exposure_s: f64,
    /// Unit cells along a, b, c.
    pub n_cells: [f64; 3],
    /// Crystal size along a, b, c (m).
    pub xtal_size_m: [f64; 3],
    /// Approximate molecular weight reported by nanoBragg.c.
    pub approx_mw: f64,
    /// Sub-pixels per pixel edge.
    pub oversample: usize,
    /// Recommended oversample for this crystal and detector.
    pub recommended_oversample: i64,
    /// Whether the oversample was chosen automatically.
    pub oversample_auto: bool,
    /// Recompute solid angle for each sub-pixel (and compound it, as C does).
    pub oversample_omega: bool,
    /// Recompute polarization for each sub-pixel (and compound it).
    pub oversample_polar: bool,
    /// Recompute absorption for each sub-pixel (and compound it).
    pub oversample_thick: bool,
    /// Phi start (rad).
    pub phi0_rad: f64,
    /// Phi step (rad).
    pub phistep_rad: f64,
    /// Oscillation range (rad).
    pub osc_rad: f64,
    /// Number of phi steps.
    pub phisteps: usize,
    /// Mosaic spread (rad).
    pub mosaic_spread_rad: f64,
    /// Mosaic domain rotations (row-major 3×3).
    pub mosaic_umats: Vec<[f64; 9]>,
    /// Real-space a, b, c (m) for each phi step × mosaic domain, phi outer:
    /// nine values per entry.
    pub cells_m: Vec<[f64; 9]>,
    /// The cells of nanoBragg.c's first sweep over the phi steps, where they
    /// differ from `cells_m` (a phi step at exactly 0 after the first: see
    /// [`PhiZero`]), as `leaves.cells`. In one thread C takes them for the
    /// first source of the first sub-pixel of the first pixel it renders
    /// (raster order, the first source that passes `-dmin`); the renderers
    /// put that pixel in afterwards.
    pub first_sweep_cells: Option<Vec<[V3<f64>; 3]>>,
    /// Lattice transform shape.
    pub shape: CrystalShape,
    /// `-fudge`.
    pub fudge: f64,
    /// Structure factor grid (empty when only `default_F` is used).
    pub grid: Option<HklGrid>,
    /// Number of structure factors initialised (`hkls` in nanoBragg.c).
    pub hkls: usize,
    /// `-default_F`.
    pub default_f: f64,
    /// Lookup mode.
    pub interpolation: Interpolation,
    /// Whether interpolation was chosen automatically (and which way).
    pub interpolation_auto: Option<bool>,
    /// Kahn factor.
    pub kahn_factor: f64,
    /// `-nopolar`.
    pub nopolar: bool,
    /// `-dmin` (m); 0 = off.
    pub dmin_m: f64,
    /// Water droplet size (m).
    pub water_size_m: f64,
    /// Photons per steradian from the water background, added to every pixel.
    pub i_bg: f64,
    /// Total samples per pixel: sources × mosaic × phi × oversample².
    pub steps: usize,
    /// Opt-in corrected physics.
    pub corrected: bool,
    /// Mask (non-zero = render), fast index fastest.
    pub mask: Option<Vec<u16>>,
    /// The amorphous sample's scattering, added to the float image
    /// (`-stol`); `None` without one.
    pub background: Option<Arc<Background>>,
    /// Warnings in the order nanoBragg.c prints them.
    pub warnings: Vec<Warning>,
    /// The numbers the render kernel reads, as [`Plan::with_leaves`] computed
    /// them (their values; the kernel's one constructor reads them).
    pub leaves: Leaves<f64>,
}

/// The plans of the panels' configurations (`panel_configs`), in order,
/// holding one structure-factor grid between them: `with`'s where given (a
/// plan of the same structure factors: another shot of the run), else the
/// first panel's.
pub fn plan_panels(
    configs: &[SimConfig],
    seeds: SetupSeeds,
    with: Option<&Plan>,
) -> Result<Vec<Plan>> {
    let mut plans: Vec<Plan> = Vec::with_capacity(configs.len());
    for c in configs {
        let plan = match with.or(plans.first()) {
            Some(p) => Plan::sharing_structure_factors(c, seeds, p)?,
            None => Plan::new(c, seeds)?,
        };
        plans.push(plan);
    }
    Ok(plans)
}

/// The phi sampling nanoBragg.c derives from `-phi`, `-osc`, `-phistep`, `-phisteps`.
/// Returns (osc, phistep, phisteps), angles in radians.
pub fn phi_steps(osc_in: f64, phistep_in: f64, phisteps_in: i64) -> (f64, f64, i64) {
    let (mut osc, mut phistep, mut phisteps) = (osc_in, phistep_in, phisteps_in);
    if phisteps < 0 {
        if osc < 0.0 {
            if phistep <= 0.0 {
                phisteps = 1;
                osc = 0.0;
                phistep = 0.0;
            } else {
                osc = phistep;
                phisteps = 2;
            }
        } else if phistep <= 0.0 {
            phisteps = 2;
            phistep = osc / 2.0;
        } else {
            phisteps = (osc / phistep).ceil() as i64;
        }
    } else {
        if phisteps == 0 {
            phisteps = 1;
        }
        if osc < 0.0 {
            if phistep <= 0.0 {
                osc = 1.0 / RTD;
                phistep = osc / phisteps as f64;
            } else {
                osc = phistep;
                phisteps = 2;
            }
        } else if phistep < 0.0 {
            phistep = osc / phisteps as f64;
        }
    }
    (osc, phistep, phisteps)
}

pub use crate::geometry::detector::BYTES_PER_PIXEL;

/// The sizes that decide how much memory a run needs (see [`MemoryNeeds::bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryNeeds {
    /// Pixels along the fast axis.
    pub fpixels: u128,
    /// Pixels along the slow axis.
    pub spixels: u128,
    /// Source points (divergence × dispersion, or source file rows).
    pub sources: u128,
    /// Mosaic domains.
    pub mosaic_domains: u128,
    /// Phi steps.
    pub phisteps: u128,
    /// Bytes of the structure factor grid setup builds (0 where none is
    /// built, or it is in memory already: an Fdump grid).
    pub grid_bytes: u128,
}

/// Bytes per source at the run's peak: the list setup builds it from, the
/// plan's entry, the leaves' two copies and the per-source tables of the
/// render kernels (measured: about 390 with a million sources).
const SOURCE_BYTES: u128 = 400;

/// Bytes per phi step × mosaic domain at setup's peak: the rotated cells,
/// the first sweep's, the plan's, the two leaves' and the kernel's (nine
/// f64 each; measured: about 420).
const CELL_BYTES: u128 = 6 * 72;

impl MemoryNeeds {
    /// Bytes for the images ([`BYTES_PER_PIXEL`] each, plus a per-row solid
    /// angle sum).
    pub fn image_bytes(&self) -> u128 {
        let pixels = self.fpixels.saturating_mul(self.spixels);
        pixels.saturating_mul(BYTES_PER_PIXEL).saturating_add(self.spixels.saturating_mul(8))
    }

    /// Bytes for the source list: the plan's entries, the divergence and
    /// wavelength tables it is built from, and the kernels' copies.
    pub fn source_bytes(&self) -> u128 {
        self.sources.saturating_mul(SOURCE_BYTES)
    }

    /// Bytes for the rotated unit cells (one per phi step × mosaic domain, in the
    /// plan, its leaves and the kernel) and the mosaic rotations.
    pub fn cell_bytes(&self) -> u128 {
        let cells = self.phisteps.saturating_mul(self.mosaic_domains);
        cells.saturating_mul(CELL_BYTES).saturating_add(self.mosaic_domains.saturating_mul(2 * 72))
    }

    /// Total bytes a run needs at its peak.
    pub fn bytes(&self) -> u128 {
        self.image_bytes()
            .saturating_add(self.source_bytes())
            .saturating_add(self.cell_bytes())
            .saturating_add(self.grid_bytes)
    }
}

/// Fails with [`Error::TooLarge`], naming the flags behind the largest array,
/// when `needs` is more than `memory` bytes (what the process may still
/// allocate, [`crate::memory::budget_bytes`]).
pub fn check_memory(needs: &MemoryNeeds, memory: u128) -> Result<()> {
    let bytes = needs.bytes();
    if bytes <= memory {
        return Ok(());
    }
    let parts = [needs.image_bytes(), needs.source_bytes(), needs.cell_bytes(), needs.grid_bytes];
    let largest = (0..parts.len()).max_by_key(|&i| parts[i]).unwrap_or(0);
    let what = match largest {
        0 => {
            format!("a {} x {} pixel detector (-detpixels/-detsize)", needs.fpixels, needs.spixels)
        }
        1 => format!(
            "{} source points (-divsteps/-hdivsteps/-vdivsteps x -dispsteps or -spectrum lines)",
            needs.sources
        ),
        2 => format!(
            "{} phi steps x {} mosaic domains (-phisteps x -mosaic_domains)",
            needs.phisteps, needs.mosaic_domains
        ),
        _ => "structure factor grid".into(),
    };
    Err(Error::TooLarge { what, bytes })
}

fn check_finite(what: &'static str, x: f64) -> Result<()> {
    if x.is_finite() {
        Ok(())
    } else {
        Err(Error::Invalid { what, msg: format!("value {x} is not finite") })
    }
}

/// Real-space a, b, c for each phi step × mosaic domain (phi outer), nine
/// values per entry: the cell rotated about the spindle by
/// `phi0 + phistep · i`, then by each domain's matrix (when `mosaic`).
///
/// A step at an angle of exactly 0 follows `zero` ([`PhiZero`]).
#[allow(clippy::too_many_arguments)]
pub fn rotated_cells<R: DiffReal>(
    abc: [V3<R>; 3],
    spindle: [f64; 3],
    phi0: R,
    phistep: R,
    phisteps: usize,
    umats: &[[R; 9]],
    mosaic: bool,
    zero: PhiZero,
) -> Vec<[R; 9]> {
    let spindle: V3<R> = lift(spindle);
    let angle = |t: usize| phi0 + phistep * R::c(t as f64);
    let mut cells = Vec::with_capacity(phisteps * umats.len());
    for phi_tic in 0..phisteps {
        // the nearest step before this one that C rotates, or none
        let before = |steps: usize| {
            (1..=steps).map(|k| angle((phi_tic + phisteps - k) % phisteps)).find(|a| a.val() != 0.0)
        };
        // (none before: its own angle, which keeps a derivative by phi)
        let phi = match zero {
            PhiZero::KeepLast if angle(phi_tic).val() == 0.0 => before(phisteps),
            PhiZero::FirstSweep if angle(phi_tic).val() == 0.0 => before(phi_tic),
            _ => None,
        }
        .unwrap_or_else(|| angle(phi_tic));
        let [ap, bp, cp] =
            if !phi.is_const_zero() { abc.map(|v| rotate_axis(v, spindle, phi)) } else { abc };
        for u in umats {
            let (a, b, c) = if mosaic {
                (rotate_umat(ap, u), rotate_umat(bp, u), rotate_umat(cp, u))
            } else {
                (ap, bp, cp)
            };
            cells.push([a[0], a[1], a[2], b[0], b[1], b[2], c[0], c[1], c[2]]);
        }
    }
    cells
}

/// The a, b, c of one entry of [`Plan::cells_m`] (nine values) as vectors,
/// as the kernel's leaves hold them.
fn abc_of<R: Copy>(m: &[R; 9]) -> [V3<R>; 3] {
    [[m[0], m[1], m[2]], [m[3], m[4], m[5]], [m[6], m[7], m[8]]]
}

/// What a phi step at an angle of exactly 0 takes. nanoBragg.c does not
/// rotate there and keeps the rotated cell left from its previous step: the
/// step before in the same sweep over the phi steps, or at the first step
/// the last rotated step of the sweep before (C keeps the cell from one
/// evaluation to the next). Only the run's first sweep starts unrotated (in
/// each thread: C's image depends on the threads; one thread's is
/// reproduced for any thread count, [`Plan::first_sweep_cells`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhiZero {
    /// The previous rotated step, cyclically: every sweep but the first.
    KeepLast,
    /// The previous rotated step of the same sweep, else unrotated: the
    /// run's first sweep.
    FirstSweep,
    /// Unrotated (`-corrected`).
    Unrotated,
}

/// The phi sampling and mosaic spread as setup resolves them (radians).
struct PhiMosaic {
    osc: f64,
    phistep: f64,
    phisteps: usize,
    phi0: f64,
    mosaic_spread: f64,
    mosaic_domains: usize,
}

impl PhiMosaic {
    /// nanoBragg.c's phi steps and mosaic domain count from `-phi`, `-osc`,
    /// `-phistep(s)`, `-mosaic` and `-mosaic_domains`.
    fn resolve(cfg: &SimConfig, warnings: &mut Vec<Warning>) -> Result<PhiMosaic> {
        let x = &cfg.crystal;
        let (osc, phistep, phisteps) = phi_steps(
            if x.osc_deg < 0.0 { -1.0 } else { x.osc_deg / RTD },
            if x.phistep_deg < 0.0 { -1.0 } else { x.phistep_deg / RTD },
            x.phisteps,
        );
        if phisteps <= 0 {
            return Err(Error::Invalid { what: "-phisteps", msg: format!("{phisteps} phi steps") });
        }
        let mut mosaic_spread = if x.mosaic_deg < 0.0 { -1.0 } else { x.mosaic_deg / RTD };
        let mut mosaic_domains = x.mosaic_domains;
        if mosaic_domains <= 0 {
            if mosaic_spread < 0.0 {
                mosaic_domains = 1;
                mosaic_spread = 0.0;
            } else if mosaic_spread == 0.0 {
                mosaic_domains = 1;
            } else {
                warnings.push(Warning::MosaicTenDomains);
                mosaic_domains = 10;
            }
        } else if mosaic_spread < 0.0 {
            warnings.push(Warning::MosaicNoSpread);
            mosaic_spread = 0.0;
            mosaic_domains = 1;
        } else if mosaic_spread == 0.0 {
            warnings.push(Warning::MosaicZeroSpread);
            mosaic_domains = 1;
        }
        Ok(PhiMosaic {
            osc,
            phistep,
            phisteps: phisteps as usize,
            phi0: x.phi0_deg / RTD,
            mosaic_spread,
            mosaic_domains: mosaic_domains as usize,
        })
    }
}

/// The beam's fluence, flux and size, and the sample clipped by the beam.
struct Exposure {
    /// Sample size along a, b, c (m), clipped to the beam.
    sample: [f64; 3],
    beamsize: f64,
    exposure: f64,
    fluence: f64,
    flux: f64,
}

impl Exposure {
    /// Fill in blanks as nanoBragg.c does: fluence from flux, the sample
    /// clipped by the beam, the flux made consistent with the fluence.
    fn resolve(cfg: &SimConfig, warnings: &mut Vec<Warning>) -> Exposure {
        let mut sample = cfg.crystal.size_mm.map(|mm| mm / 1000.0);
        let beamsize = cfg.beam.beamsize_mm / 1000.0;
        let exposure = cfg.beam.exposure_s;
        let mut fluence = cfg.beam.fluence;
        let mut flux = cfg.beam.flux;
        if flux != 0.0 && exposure > 0.0 && beamsize >= 0.0 {
            fluence = flux * exposure / beamsize / beamsize;
        }
        if beamsize >= 0.0 {
            if beamsize < sample[1] {
                warnings.push(Warning::ClipSampleHigh(sample[1], beamsize));
                sample[1] = beamsize;
            }
            if beamsize < sample[2] {
                warnings.push(Warning::ClipSampleWide(sample[2], beamsize));
                sample[2] = beamsize;
            }
        }
        if exposure > 0.0 {
            flux = fluence / exposure * beamsize * beamsize;
        }
        Exposure { sample, beamsize, exposure, fluence, flux }
    }
}

/// The crystal's size in unit cells and the oversampling it asks for.
struct CrystalSize {
    n_cells: [f64; 3],
    xtal: [f64; 3],
    approx_mw: f64,
    oversample: usize,
    recommended: i64,
    oversample_auto: bool,
}

impl CrystalSize {
    /// Unit cells along a, b, c (from `-N` or the sample size), the crystal
    /// size, and the oversample recommended for it on this detector.
    fn resolve(
        cfg: &SimConfig,
        sample: [f64; 3],
        cell: &Cell,
        lambda0_m: f64,
        detector: &Detector,
        warnings: &mut Vec<Warning>,
    ) -> Result<CrystalSize> {
        let lengths = [cell.a_m, cell.b_m, cell.c_m].map(crate::vec3::magnitude);
        let given = [cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc];
        let n_cells: [f64; 3] = std::array::from_fn(|i| {
            let n = if sample[i] > 0.0 { (sample[i] / lengths[i]).ceil() } else { given[i] };
            if n <= 1.0 {
                1.0
            } else {
                n
            }
        });
        let xtal: [f64; 3] = std::array::from_fn(|i| lengths[i] * n_cells[i]);
        let mut xtal_max = xtal[0];
        if xtal_max < xtal[1] {
            xtal_max = xtal[1];
        }
        if xtal_max < xtal[2] {
            xtal_max = xtal[2];
        }
        let reciprocal_pixel = lambda0_m * detector.distance_m / detector.pixel_size_m;
        let recommended = ((3.0 * xtal_max / reciprocal_pixel).ceil() as i64).max(1);
        let mut oversample = cfg.sampling.oversample;
        let oversample_auto = oversample <= 0;
        if oversample <= 0 {
            oversample = recommended;
        }
        if oversample < recommended {
            warnings.push(Warning::Undersampled(
                xtal_max * 1e10,
                reciprocal_pixel * 1e10,
                recommended,
            ));
        }
        if oversample > 10_000 {
            if oversample_auto {
                // nothing asked for this many: the geometry did
                return Err(Error::Invalid {
                    what: "detector geometry",
                    msg: format!(
                        "the automatic oversampling (no -oversample given) for a {} Å crystal \
                         (-N/-cell/-xtalsize) seen {} mm away with {} mm pixels at {} Å \
                         (-distance/-close_distance/-twotheta/-beam_vector, -pixel, -lambda) \
                         would be {oversample} sub-pixels per edge, too many; give -oversample \
                         or a sensible geometry",
                        xtal_max * 1e10,
                        detector.distance_m * 1e3,
                        detector.pixel_size_m * 1e3,
                        lambda0_m * 1e10
                    ),
                });
            }
            return Err(Error::Invalid {
                what: "-oversample",
                msg: format!("{oversample} sub-pixels per edge is too many"),
            });
        }
        let volume = xtal[0] * xtal[1] * xtal[2];
        let approx_mw = volume * 1.2e6 * AVOGADRO / (n_cells[0] * n_cells[1] * n_cells[2]);
        Ok(CrystalSize {
            n_cells,
            xtal,
            approx_mw,
            oversample: oversample.max(1) as usize,
            recommended,
            oversample_auto,
        })
    }
}

/// Refuse inputs no run can use, before anything is resolved.
fn check_inputs(cfg: &SimConfig) -> Result<()> {
    let lambda0_m = cfg.beam.lambda_a / 1.0e10;
    if !(lambda0_m > 0.0 && lambda0_m.is_finite()) {
        return Err(Error::Invalid {
            what: "-lambda",
            msg: format!("wavelength {} Å must be positive", cfg.beam.lambda_a),
        });
    }
    check_finite("-distance", cfg.detector.distance_mm)?;
    if cfg.detector.distance_mm <= 0.0 && cfg.detector.close_distance_mm.is_none() {
        return Err(Error::Invalid { what: "-distance", msg: "distance must be positive".into() });
    }
    let b = &cfg.beam;
    if let Some(lines) = &b.spectrum {
        let clash = if b.sources.is_some() {
            Some("-sourcefile (whose sources carry their own wavelengths)")
        } else if b.dispersion_pct != 0.0 || b.dispsteps >= 0 {
            Some("-dispersion/-dispsteps (the spectrum's lines are the wavelengths)")
        } else {
            None
        };
        if let Some(clash) = clash {
            return Err(Error::Invalid {
                what: "-spectrum",
                msg: format!("cannot be combined with {clash}"),
            });
        }
        if lines.is_empty() {
            return Err(Error::Invalid { what: "-spectrum", msg: "no spectral lines".into() });
        }
    }
    check_finite("-lambda_offset", b.lambda_offset_a)?;
    check_finite("-lambda_scale", b.lambda_scale)?;
    if b.flux != 0.0 && b.exposure_s > 0.0 {
        let fluence = b.flux * b.exposure_s / (b.beamsize_mm / 1000.0) / (b.beamsize_mm / 1000.0);
        if !fluence.is_finite() {
            return Err(Error::Invalid {
                what: "-flux",
                msg: format!(
                    "{:e} photons/s x -exposure {:e} s / (-beamsize {:e} mm)² overflows: the fluence is not finite",
                    b.flux, b.exposure_s, b.beamsize_mm
                ),
            });
        }
    }
    for (what, n) in [("-Na", cfg.crystal.na), ("-Nb", cfg.crystal.nb), ("-Nc", cfg.crystal.nc)] {
        if !(n.is_finite() && n >= 0.0) {
            return Err(Error::Invalid { what, msg: format!("{n} unit cells") });
        }
    }
    Ok(())
}

/// Refuse runs whose arrays cannot fit, before allocating any of them;
/// `grid_bytes` is the structure factor grid about to be built.
fn check_run_memory(
    cfg: &SimConfig,
    detector: &Detector,
    phi: &PhiMosaic,
    grid_bytes: u128,
) -> Result<()> {
    let source_count = match &cfg.beam.sources {
        Some(rows) if !rows.is_empty() => rows.len() as u128,
        _ => {
            let count = |range: f64, step: f64, steps: i64| {
                crate::source::auto_steps(range, step, steps).2.max(1) as u128
            };
            let b = &cfg.beam;
            let wavelengths = match &b.spectrum {
                Some(lines) => lines.len().max(1) as u128,
                None => count(b.dispersion_pct / 100.0, -1.0, b.dispsteps),
            };
            count(b.hdivrange_mrad / 1000.0, b.hdivstep_mrad / 1000.0, b.hdivsteps)
                * count(b.vdivrange_mrad / 1000.0, b.vdivstep_mrad / 1000.0, b.vdivsteps)
                * wavelengths
        }
    };
    let needs = MemoryNeeds {
        fpixels: detector.fpixels as u128,
        spixels: detector.spixels as u128,
        sources: source_count,
        mosaic_domains: phi.mosaic_domains.max(1) as u128,
        phisteps: phi.phisteps as u128,
        grid_bytes,
    };
    check_memory(&needs, crate::memory::budget_for(needs.bytes()))
}

/// Where [`Plan::resolve`] takes the structure factors from.
enum StructureFactors<'a> {
    /// Built from the configuration ([`structure_factors`]).
    Build,
    /// Not built: only their count, from a plan that has them.
    Count(usize),
    /// Those of a plan of the same structure factors (its grid shared).
    Shared(&'a Plan),
}

/// Bytes of the grid [`structure_factors`] builds (0 for an Fdump grid,
/// which is in memory already and shared, not copied).
fn grid_bytes(cfg: &SimConfig) -> Result<u128> {
    match &cfg.sf.source {
        SfSource::Hkl(entries) => crate::sf::hkl::grid_bytes(entries),
        SfSource::None | SfSource::Dump(_) => Ok(0),
    }
}

/// The structure factor grid (from `-hkl` entries or an Fdump grid) and the
/// number of structure factors it was built from.
fn structure_factors(cfg: &SimConfig) -> Result<(Option<HklGrid>, usize)> {
    let (grid, hkls) = match &cfg.sf.source {
        SfSource::None => (None, 0usize),
        SfSource::Hkl(entries) => {
            (Some(HklGrid::from_entries(entries, cfg.sf.default_f)?), entries.len())
        }
        SfSource::Dump(g) => {
            let n = (g.h_range() as i64 * g.k_range() as i64 * g.l_range() as i64).max(0) as usize;
            // shares the values (see HklGrid::data)
            (Some(g.clone()), n)
        }
    };
    if grid.is_none() && cfg.sf.default_f == 0.0 {
        return Err(Error::Invalid {
            what: "-hkl",
            msg: "no structure factors: give -hkl FILE, an Fdump file, or -default_F".into(),
        });
    }
    Ok((grid, hkls))
}

/// The sources, and each one's direction and wavelength in `R`.
fn resolve_sources<R: DiffReal>(
    cfg: &SimConfig,
    lambda0: R,
    detector: &Detector,
    deltas: &Deltas<R>,
) -> Result<(Sources, Vec<SourceIn<R>>)> {
    let d = detector;
    let moved = cfg.beam.lambda_offset_a != 0.0 || cfg.beam.lambda_scale != 1.0;
    let (mut sources, inputs) =
        Sources::resolve_in(&cfg.beam, lambda0, d.beam, d.polar, d.vert, deltas).map_err(|e| {
            match e {
                Error::Invalid { what: "-lambda", msg } if moved => Error::Invalid {
                    what: "-lambda_offset",
                    msg: format!("{msg} (after -lambda_offset and -lambda_scale)"),
                },
                // a bad wavelength here comes from the source file's fifth column
                Error::Invalid { what: "-lambda", msg } if cfg.beam.sources.is_some() => {
                    Error::Invalid {
                        what: "-sourcefile",
                        msg: format!("{msg} (a source's wavelength column)"),
                    }
                }
                e => e,
            }
        })?;
    sources.apply_weights(cfg.sampling.corrected)?;
    Ok((sources, inputs))
}

/// The rotation `-misset random` draws from its seed.
fn random_misset_umat(cfg: &SimConfig, seeds: SetupSeeds) -> Option<[f64; 9]> {
    (cfg.crystal.misset == crate::config::Misset::Random).then(|| {
        let mut rng = Ran1::new(seeds.misset_idum);
        crate::crystal::mosaic::mosaic_rotation_umat(90.0, &mut rng)
    })
}

/// Photons per steradian scattered by a water droplet of `size_m` (the
/// background nanoBragg.c adds to every pixel).
fn water_background<R: Real>(fluence: R, size_m: R) -> R {
    let c = R::c;
    c(WATER_F) * c(WATER_F) * c(R_E_SQR) * fluence * size_m * size_m * size_m * c(1e6) * c(AVOGADRO)
        / c(WATER_MW)
}

impl Plan {
    /// Resolve a configuration. `seeds` supplies the random state for
    /// `-misset random`; mosaic domains use `cfg.crystal.mosaic_seed`.
    pub fn new(cfg: &SimConfig, seeds: SetupSeeds) -> Result<Plan> {
        Ok(Self::with_leaves::<f64>(cfg, seeds, &Deltas::zero())?.0)
    }

    /// [`Plan::new`] with the structure factors of `with`, a plan of the
    /// same ones (another panel of the detector, another shot of the
    /// experiment): its grid is shared, not built again, so that a run
    /// holds one grid however many panels and shots it plans.
    pub fn sharing_structure_factors(
        cfg: &SimConfig,
        seeds: SetupSeeds,
        with: &Plan,
    ) -> Result<Plan> {
        let shared = StructureFactors::Shared(with);
        Ok(Self::resolve::<f64>(cfg, seeds, &Deltas::zero(), shared)?.0)
    }

    /// The one setup code path: the plan of `cfg` and the numbers the kernel
    /// reads in `R`, with each parameter's perturbation in `deltas` added
    /// where the parameter enters (the seeded derivatives of dual numbers).
    /// The plan holds the value parts; with all-zero f64 deltas its leaves
    /// ([`Plan::leaves`]) are exactly the returned ones.
    pub fn with_leaves<R: DiffReal>(
        cfg: &SimConfig,
        seeds: SetupSeeds,
        deltas: &Deltas<R>,
    ) -> Result<(Plan, Leaves<R>)> {
        Self::resolve(cfg, seeds, deltas, StructureFactors::Build)
    }

    /// This plan with its crystal turned by the row-major rotation `u` after
    /// the missetting, before the phi and mosaic rotations: the cell, the
    /// phi × mosaic cells (C's first sweep's included) and the kernel's
    /// leaves as setup builds them for that orientation. The shots of one
    /// experiment that differ in orientation alone (the GPU batch) are its
    /// plan rotated.
    pub fn rotated(&self, u: &[f64; 9]) -> Plan {
        let turn = |v: V3<f64>| rotate_umat(v, u);
        let mut p = self.clone();
        let c = &mut p.cell;
        [c.a_m, c.b_m, c.c_m, c.a_star, c.b_star, c.c_star] =
            [c.a_m, c.b_m, c.c_m, c.a_star, c.b_star, c.c_star].map(turn);
        let abc = [c.a_m, c.b_m, c.c_m];
        let sweep = |zero| {
            rotated_cells(
                abc,
                self.detector.spindle,
                self.phi0_rad,
                self.phistep_rad,
                self.phisteps,
                &self.mosaic_umats,
                self.mosaic_spread_rad > 0.0,
                zero,
            )
        };
        let triples = |cells: &[[f64; 9]]| cells.iter().map(abc_of).collect::<Vec<_>>();
        p.cells_m = sweep(if self.corrected { PhiZero::Unrotated } else { PhiZero::KeepLast });
        p.first_sweep_cells =
            self.first_sweep_cells.is_some().then(|| triples(&sweep(PhiZero::FirstSweep)));
        p.leaves.cells = triples(&p.cells_m);
        p.leaves.recip = self.leaves.recip.map(turn);
        p
    }

    /// [`Plan::with_leaves`] with the structure factors given by `sf`: the
    /// derivative path, which has the f64 plan already, passes its count
    /// instead of building the grid again (no lookup reads the leaves' plan).
    fn resolve<R: DiffReal>(
        cfg: &SimConfig,
        seeds: SetupSeeds,
        deltas: &Deltas<R>,
        sf: StructureFactors<'_>,
    ) -> Result<(Plan, Leaves<R>)> {
        let c = R::c;
        check_inputs(cfg)?;
        if !cfg.detector.panels.is_empty() {
            return Err(Error::Invalid {
                what: "-expt",
                msg: format!(
                    "this operation takes a detector of one panel; this one has {}",
                    cfg.detector.panels.len()
                ),
            });
        }
        let mut warnings = Vec::new();
        let lambda0 = deltas.apply(Param::Lambda, c(cfg.beam.lambda_a), 1.0) / c(1.0e10);
        let lambda0_m = lambda0.val();
        let beam = Exposure::resolve(cfg, &mut warnings);
        let corrected = cfg.sampling.corrected;
        let (detector, place) = Detector::resolve_in(&cfg.detector, deltas, corrected)?;
        let phi = PhiMosaic::resolve(cfg, &mut warnings)?;
        warnings.extend(detector.warnings.iter().cloned());
        let new_grid = match sf {
            // an unusable hkl list is reported where the grid is built
            StructureFactors::Build => grid_bytes(cfg).unwrap_or(0),
            StructureFactors::Count(_) | StructureFactors::Shared(_) => 0,
        };
        check_run_memory(cfg, &detector, &phi, new_grid)?;

        let random_umat = random_misset_umat(cfg, seeds);
        let (cell, vectors) =
            Cell::resolve_in(&cfg.crystal, lambda0, random_umat, deltas, corrected)?;
        warnings.extend(cell.warnings.iter().cloned());
        let (sources, source_leaves) = resolve_sources(cfg, lambda0, &detector, deltas)?;
        // the finest sampling any line needs decides (its shortest
        // wavelength) for a -spectrum, and for every source under
        // -corrected; nanoBragg.c looks at -lambda alone
        let sampling_lambda_m = match cfg.beam.spectrum.is_some() || corrected {
            true => match sources.list.iter().map(|s| s.lambda_m).fold(f64::INFINITY, f64::min) {
                shortest if shortest.is_finite() => shortest,
                _ => lambda0_m,
            },
            false => lambda0_m,
        };
        let size = CrystalSize::resolve(
            cfg,
            beam.sample,
            &cell,
            sampling_lambda_m,
            &detector,
            &mut warnings,
        )?;
        // interpolation auto-selection: nanoBragg.c looks at the -N values,
        // before -xtalsize sets the cell counts; -corrected at the counts used
        let n_cells = match corrected {
            false => [cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc],
            true => size.n_cells,
        };
        let (interp_choice, interpolation_auto) = match cfg.sf.interpolate {
            Some(b) => (b, None),
            None => {
                let b = n_cells.iter().any(|&n| n <= 2.0);
                (b, Some(b))
            }
        };
        let (grid, hkls) = match sf {
            StructureFactors::Build => structure_factors(cfg)?,
            StructureFactors::Count(n) => (None, n),
            StructureFactors::Shared(p) => (p.grid.clone(), p.hkls),
        };
        let interpolation = if interp_choice && hkls > 0 {
            Interpolation::Tricubic
        } else {
            Interpolation::Nearest
        };

        let phi0 = deltas.apply(Param::Phi, c(phi.phi0), 1.0 / RTD);
        let phistep = deltas.apply(Param::Osc, c(phi.phistep), 1.0 / RTD / phi.phisteps as f64);
        let spread = deltas.apply(Param::Mosaic, c(phi.mosaic_spread), 1.0 / RTD);
        let mut rng = Ran1::new(-cfg.crystal.mosaic_seed);
        let umats = crate::crystal::mosaic::mosaic_umats_in(spread, phi.mosaic_domains, &mut rng);
        let cells = rotated_cells(
            [vectors.a, vectors.b, vectors.c],
            detector.spindle,
            phi0,
            phistep,
            phi.phisteps,
            &umats,
            phi.mosaic_spread > 0.0,
            if cfg.sampling.corrected { PhiZero::Unrotated } else { PhiZero::KeepLast },
        );
        let first_sweep_cells = (!cfg.sampling.corrected)
            .then(|| {
                rotated_cells(
                    [vectors.a, vectors.b, vectors.c].map(|v| v.map(R::val)),
                    detector.spindle,
                    phi0.val(),
                    phistep.val(),
                    phi.phisteps,
                    &umats.iter().map(|u| u.map(R::val)).collect::<Vec<_>>(),
                    phi.mosaic_spread > 0.0,
                    PhiZero::FirstSweep,
                )
            })
            .filter(|first| first.iter().zip(&cells).any(|(f, c)| *f != c.map(R::val)))
            .map(|first| first.iter().map(abc_of).collect());
        let fluence = deltas.apply(Param::Fluence, c(beam.fluence), 1.0);
        let water = deltas.apply(Param::Water, c(cfg.sampling.water_um), 1.0) / c(1e6);
        let leaves = Leaves {
            pixel: c(detector.pixel_size_m),
            fdet: place.fdet,
            sdet: place.sdet,
            odet: place.odet,
            pix0: place.pix0,
            beam: lift(detector.beam),
            distance: place.distance,
            close_distance: place.close_distance,
            polar_axis: lift(detector.polar),
            sources: source_leaves
                .iter()
                .zip(sources.kernel_weights())
                .map(|(s, weight)| LeafSource {
                    incident: s.dir.map(|x| -x),
                    lambda: s.lambda,
                    weight,
                })
                .collect(),
            cells: cells.iter().map(abc_of).collect(),
            recip: [vectors.a_star, vectors.b_star, vectors.c_star],
            n_cells: [Param::Na, Param::Nb, Param::Nc]
                .map(|p| deltas.apply(p, c(size.n_cells[p as usize - Param::Na as usize]), 1.0)),
            fudge: deltas.apply(Param::Fudge, c(cfg.crystal.fudge), 1.0),
            kahn: deltas.apply(Param::Polar, c(cfg.beam.kahn_factor), 1.0),
            scale: c(R_E_SQR) * fluence,
            i_bg: water_background(fluence, water),
            default_f: deltas.apply(Param::DefaultF, c(cfg.sf.default_f), 1.0),
        };
        let value_leaves = leaves.map(R::val);
        let mut plan = Plan {
            steps: sources.list.len()
                * phi.mosaic_domains
                * phi.phisteps
                * size.oversample
                * size.oversample,
            detector,
            sources,
            cell,
            lambda0_m,
            fluence: beam.fluence,
            flux: beam.flux,
            beamsize_m: beam.beamsize,
            exposure_s: beam.exposure,
            n_cells: size.n_cells,
            xtal_size_m: size.xtal,
            approx_mw: size.approx_mw,
            oversample: size.oversample,
            recommended_oversample: size.recommended,
            oversample_auto: size.oversample_auto,
            oversample_omega: cfg.sampling.oversample_omega,
            oversample_polar: cfg.sampling.oversample_polar,
            oversample_thick: cfg.sampling.oversample_thick,
            phi0_rad: phi.phi0,
            phistep_rad: phi.phistep,
            osc_rad: phi.osc,
            phisteps: phi.phisteps,
            mosaic_spread_rad: phi.mosaic_spread,
            mosaic_umats: umats.iter().map(|u| u.map(R::val)).collect(),
            cells_m: cells.iter().map(|m| m.map(R::val)).collect(),
            shape: cfg.crystal.shape,
            fudge: cfg.crystal.fudge,
            grid,
            hkls,
            default_f: cfg.sf.default_f,
            interpolation,
            interpolation_auto,
            kahn_factor: cfg.beam.kahn_factor,
            nopolar: cfg.beam.nopolar,
            dmin_m: cfg.sampling.dmin_a * 1e-10,
            water_size_m: cfg.sampling.water_um / 1e6,
            i_bg: value_leaves.i_bg,
            corrected: cfg.sampling.corrected,
            first_sweep_cells,
            mask: cfg.detector.mask.clone(),
            background: None,
            warnings,
            leaves: value_leaves,
        };
        if let Some(a) = &cfg.amorphous {
            plan.background = Some(Arc::new(amorphous_background(a, &plan)?));
        }
        Ok((plan, leaves))
    }

    /// Number of mosaic domains.
    pub fn mosaic_domains(&self) -> usize {
        self.mosaic_umats.len()
    }
}

/// The amorphous sample's background on the plan's detector, under its
/// sources, polarization and fluence, sampled on its sub-pixel grid: what
/// nonBragg.c renders for the same geometry. The sensor's absorption
/// (`-detector_thick`) applies to it as a whole (every layer together).
fn amorphous_background(a: &AmorphousConfig, plan: &Plan) -> Result<Background> {
    let invalid = |msg: String| Error::Invalid { what: "-stol", msg };
    let table = StolTable::new(&a.rows, a.to_stol)
        .ok_or_else(|| invalid("the table has no structure factors".into()))?;
    if !table.is_increasing() {
        return Err(invalid("sin(theta)/lambda must increase from one row to the next".into()));
    }
    let mut size = a.size_mm.map(|v| v / 1000.0);
    if plan.beamsize_m > 0.0 {
        // the beam only lights this much of the sample's height and width
        size[1] = size[1].min(plan.beamsize_m);
        size[2] = size[2].min(plan.beamsize_m);
    }
    let molecules = match a.molecules {
        Some(n) => n,
        None => {
            let volume = size[0] * size[1] * size[2];
            volume * a.density_g_cm3 * 1e6 * crate::amorphous::AVOGADRO / a.molecular_weight
        }
    };
    if !(molecules.is_finite() && molecules >= 0.0) {
        return Err(Error::Invalid {
            what: "-density",
            msg: format!("{molecules} molecules in the amorphous sample (-density, -MW, -molecules, -amorphous_*)"),
        });
    }
    let d = &plan.detector;
    let sensor = (d.thick_m > 0.0).then_some(AmorphousSensor {
        thickness_m: d.thick_m,
        mu_per_m: d.mu_per_m,
        odet: d.odet,
    });
    let det = AmorphousDetector {
        fpixels: d.fpixels,
        spixels: d.spixels,
        pixel_size: d.pixel_size_m,
        oversample: plan.oversample,
        pix0: d.pix0,
        fdet: d.fdet,
        sdet: d.sdet,
        beam: d.beam,
        distance: d.distance_m,
        close_distance: d.close_distance_m,
        curved: d.curved,
        point_pixel: d.point_pixel,
        roi: d.roi,
        sensor,
    };
    // weights as fractions of the fluence (nonBragg.c divides their sum by
    // the number of sources instead, which only agrees when they average 1)
    let list = &plan.sources.list;
    let total: f64 = list.iter().map(|s| s.weight).sum();
    let norm = if total > 0.0 { list.len() as f64 / total } else { 1.0 };
    let sources = list
        .iter()
        .map(|s| AmorphousSource {
            position: s.position,
            weight: s.weight * norm,
            lambda: s.lambda_m,
        })
        .collect();
    let sample = AmorphousSample {
        kahn: plan.kahn_factor,
        nopolar: plan.nopolar,
        polar_vector: d.polar,
        fluence: plan.fluence,
        molecules,
        fmap: false,
    };
    Background::new(det, sources, sample, table)
        .ok_or_else(|| invalid("no sources to scatter".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan turned after the misset is the plan of the turned crystal:
    /// the cells (C's first sweep's too), the leaves and the image of the
    /// misset that makes the same turn.
    #[test]
    fn a_rotated_plan_is_the_plan_of_the_turned_crystal() {
        use crate::config::Misset;
        use crate::render::{render, Precision, RenderOptions};
        use crate::vec3::rotate_xyz;
        let plan_of = |misset: Misset| {
            let mut cfg = SimConfig::default();
            cfg.crystal.cell = Some([70.0, 80.0, 90.0, 75.0, 85.0, 95.0]);
            cfg.crystal.misset = misset;
            cfg.crystal.na = 5.0;
            cfg.crystal.nb = 5.0;
            cfg.crystal.nc = 5.0;
            // steps from phi = 0: C's first sweep has cells of its own
            cfg.crystal.osc_deg = 1.0;
            cfg.crystal.phisteps = 3;
            cfg.crystal.mosaic_deg = 0.5;
            cfg.crystal.mosaic_domains = 2;
            cfg.sf.default_f = 100.0;
            cfg.detector.fpixels = 48;
            cfg.detector.spixels = 48;
            Plan::new(&cfg, SetupSeeds { misset_idum: -1 }).unwrap()
        };
        let angles = [10.0f64, 20.0, 30.0].map(|d| d / RTD);
        let column = |e: V3<f64>| rotate_xyz(e, angles[0], angles[1], angles[2]);
        let [x, y, z] = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]].map(column);
        let u = [x[0], y[0], z[0], x[1], y[1], z[1], x[2], y[2], z[2]];
        let start = plan_of(Misset::None);
        let turned = start.rotated(&u);
        let want = plan_of(Misset::Angles([10.0, 20.0, 30.0]));
        let close = |a: &[f64], b: &[f64]| {
            let scale = b.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-13 * scale)
        };
        let flat = |cells: &[[V3<f64>; 3]]| -> Vec<f64> {
            cells.iter().flatten().flatten().copied().collect()
        };
        assert!(close(turned.cells_m.as_flattened(), want.cells_m.as_flattened()));
        assert!(close(&flat(&turned.leaves.cells), &flat(&want.leaves.cells)));
        assert!(close(
            &flat(&turned.first_sweep_cells.clone().unwrap()),
            &flat(&want.first_sweep_cells.clone().unwrap())
        ));
        assert!(close(turned.leaves.recip.as_flattened(), want.leaves.recip.as_flattened()));
        assert!(close(&turned.cell.a_star, &want.cell.a_star));
        let (a, b) = (
            render::<f32>(&turned, RenderOptions::new(Precision::Exact64)),
            render::<f32>(&want, RenderOptions::new(Precision::Exact64)),
        );
        let peak = b.image.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let worst = a.image.iter().zip(&b.image).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(peak > 0.0 && worst <= 1e-6 * peak, "{worst} of {peak}");
        // (and the unrotated plan's image is another)
        let other = render::<f32>(&start, RenderOptions::new(Precision::Exact64)).image;
        assert!(other.iter().zip(&b.image).any(|(x, y)| (x - y).abs() > 1e-3 * peak));
        // the identity leaves every number as it was
        let same = start.rotated(&[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]);
        assert_eq!(same.cells_m, start.cells_m);
        assert_eq!(same.first_sweep_cells, start.first_sweep_cells);
        assert_eq!(same.leaves.cells, start.leaves.cells);
        assert_eq!(same.leaves.recip, start.leaves.recip);
    }

    #[test]
    fn memory_check() {
        let needs = MemoryNeeds {
            fpixels: 1000,
            spixels: 2000,
            sources: 1,
            mosaic_domains: 1,
            phisteps: 1,
            grid_bytes: 0,
        };
        assert_eq!(needs.image_bytes(), 2_000_000 * BYTES_PER_PIXEL + 2000 * 8);
        assert!(check_memory(&needs, 1 << 30).is_ok());
        match check_memory(&needs, 1 << 20) {
            Err(Error::TooLarge { what, bytes }) => {
                assert!(what.contains("1000 x 2000") && what.contains("-detpixels"), "{what}");
                assert_eq!(bytes, needs.bytes());
            }
            other => panic!("{other:?}"),
        }
        let cells = MemoryNeeds { phisteps: 1 << 40, ..needs };
        match check_memory(&cells, 1 << 30) {
            Err(Error::TooLarge { what, .. }) => assert!(what.contains("-phisteps"), "{what}"),
            other => panic!("{other:?}"),
        }
        let sources = MemoryNeeds { sources: 1 << 40, ..needs };
        match check_memory(&sources, 1 << 30) {
            Err(Error::TooLarge { what, .. }) => assert!(what.contains("-divsteps"), "{what}"),
            other => panic!("{other:?}"),
        }
        let grid = MemoryNeeds { grid_bytes: 1 << 40, ..needs };
        match check_memory(&grid, 1 << 30) {
            Err(Error::TooLarge { what, bytes }) => {
                assert_eq!(what, "structure factor grid");
                assert_eq!(bytes, (1 << 40) + needs.bytes());
            }
            other => panic!("{other:?}"),
        }
        // the parts add up: each fits alone, not together
        let half = needs.bytes();
        assert!(check_memory(&grid_of(half), 2 * half).is_ok());
        assert!(check_memory(&grid_of(half + 1), 2 * half).is_err());
        // nothing overflows
        let huge = MemoryNeeds {
            fpixels: u128::MAX,
            spixels: u128::MAX,
            sources: u128::MAX,
            mosaic_domains: u128::MAX,
            phisteps: u128::MAX,
            grid_bytes: u128::MAX,
        };
        assert!(check_memory(&huge, u128::MAX - 1).is_err());
    }

    fn grid_of(bytes: u128) -> MemoryNeeds {
        MemoryNeeds {
            fpixels: 1000,
            spixels: 2000,
            sources: 1,
            mosaic_domains: 1,
            phisteps: 1,
            grid_bytes: bytes,
        }
    }

    /// A phi step at exactly 0 keeps the previous rotated step (cyclically
    /// for every sweep, within the sweep for the first) or, corrected, is
    /// the unrotated cell; other steps are rotated by their own angle.
    #[test]
    fn phi_steps_at_zero() {
        let abc = [[1.0, 0.2, 0.0], [0.0, 1.0, 0.3], [0.1, 0.0, 1.0]];
        let spindle = [0.0, 0.0, 1.0];
        let id = [[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]];
        // the angle of step t as setup forms it
        let angle =
            |phi0: f64, step: f64, t: usize| phi0.to_radians() + step.to_radians() * t as f64;
        let turned = |r: f64| {
            let v = abc.map(|v| rotate_axis(v, spindle, r));
            [v[0][0], v[0][1], v[0][2], v[1][0], v[1][1], v[1][2], v[2][0], v[2][1], v[2][2]]
        };
        let cells = |phi0: f64, step: f64, n: usize, zero: PhiZero| {
            let (p0, ps) = (phi0.to_radians(), step.to_radians());
            rotated_cells(abc, spindle, p0, ps, n, &id, false, zero)
        };
        // steps at 0, 10, 20 degrees
        let (r10, r20) = (angle(0.0, 10.0, 1), angle(0.0, 10.0, 2));
        assert_eq!(cells(0.0, 10.0, 3, PhiZero::KeepLast), [turned(r20), turned(r10), turned(r20)]);
        assert_eq!(cells(0.0, 10.0, 3, PhiZero::FirstSweep)[0], turned(0.0));
        assert_eq!(cells(0.0, 10.0, 3, PhiZero::Unrotated)[0], turned(0.0));
        assert_eq!(turned(0.0), [1.0, 0.2, 0.0, 0.0, 1.0, 0.3, 0.1, 0.0, 1.0]);
        // steps at -10, 0, 10: the middle one keeps -10 in every sweep
        for zero in [PhiZero::KeepLast, PhiZero::FirstSweep] {
            let c = cells(-10.0, 10.0, 3, zero);
            assert_eq!(c[1], turned(angle(-10.0, 10.0, 0)));
            assert_eq!(c[2], turned(angle(-10.0, 10.0, 2)));
        }
        // no step rotates: the cell as it is
        assert_eq!(cells(0.0, 0.0, 2, PhiZero::KeepLast), [turned(0.0), turned(0.0)]);
    }

    #[test]
    fn phi_step_selection() {
        let d = 1.0 / RTD;
        // nothing: one step at phi0
        assert_eq!(phi_steps(-1.0, -1.0, -1), (0.0, 0.0, 1));
        // osc only: two steps half the range apart
        let (o, s, n) = phi_steps(20.0 * d, -1.0, -1);
        assert_eq!(n, 2);
        assert!((s - 10.0 * d).abs() < 1e-15 && (o - 20.0 * d).abs() < 1e-15);
        // osc and step: ceil(osc/step)
        assert_eq!(phi_steps(30.0 * d, 7.5 * d, -1).2, 4);
        // osc and steps: step = osc/steps
        let (_, s, n) = phi_steps(20.0 * d, -1.0, 5);
        assert_eq!(n, 5);
        assert!((s - 4.0 * d).abs() < 1e-15);
        // steps only: 1 degree range
        let (o, _, n) = phi_steps(-1.0, -1.0, 4);
        assert_eq!(n, 4);
        assert!((o - d).abs() < 1e-15);
        // zero steps is one step
        assert_eq!(phi_steps(-1.0, -1.0, 0).2, 1);
        // zero oscillation still gives two steps
        assert_eq!(phi_steps(0.0, -1.0, -1).2, 2);
    }
}
