//! What the user asked for, in the units of the nanoBragg command line.
//!
//! A [`SimConfig`] holds every input that changes the rendered image, exactly as
//! given (millimetres, degrees, Ångström, microns, ...). [`crate::setup`] turns
//! it into a [`crate::setup::Plan`] in SI units with all defaults resolved.
//! Flags that only one run of the C program sees in sequence (pivot, convention)
//! are stored as their final value: the CLI applies flags in command-line order.

use crate::sf::HklEntry;

/// Detector origin conventions of nanoBragg.c (`-mosflm`, `-xds`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Convention {
    /// Vectors given by the user (`-fdet_vector` and friends).
    Custom,
    /// ADXV: origin at the top-left corner, beam along +z.
    Adxv,
    /// MOSFLM (the default): beam along +x, 0.5 pixel centre shift.
    #[default]
    Mosflm,
    /// XDS: beam along +z, ORGX/ORGY origin, sample pivot.
    Xds,
    /// DIALS: as XDS with spindle and polarization along y.
    Dials,
    /// DENZO: MOSFLM axes without the 0.5 pixel shift.
    Denzo,
}

/// Point the detector rotations pivot about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pivot {
    /// Rotate about the sample: the closest point (Xclose/Yclose) is kept.
    Sample,
    /// Rotate about the direct-beam spot (Xbeam/Ybeam is kept).
    #[default]
    Beam,
}

/// Shape of the crystal, which sets the lattice transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CrystalShape {
    /// Parallelepiped: product of three `sincg` grating functions (default).
    #[default]
    Square,
    /// Ellipsoid: `sinc3` of the radius in hkl space.
    Round,
    /// Gaussian spots with no inter-Bragg fringes.
    Gauss,
    /// Flat-topped spots cut at the FWHM.
    Tophat,
}

/// How the crystal orientation is perturbed before rendering.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Misset {
    /// No misset rotation.
    #[default]
    None,
    /// Rotations about x, y, z in degrees, applied in that order.
    Angles([f64; 3]),
    /// Random orientation drawn from `misset_seed`.
    Random,
}

/// Detector geometry as given on the command line.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectorConfig {
    /// `-pixel` (mm).
    pub pixel_mm: f64,
    /// `-detpixels_f` (0 = derive from `detsize_f_mm`).
    pub fpixels: i64,
    /// `-detpixels_s` (0 = derive from `detsize_s_mm`).
    pub spixels: i64,
    /// `-detsize_f` (mm).
    pub detsize_f_mm: f64,
    /// `-detsize_s` (mm).
    pub detsize_s_mm: f64,
    /// `-distance` (mm): sample to beam spot along the beam.
    pub distance_mm: f64,
    /// `-close_distance` (mm): sample to the closest point of the detector plane.
    pub close_distance_mm: Option<f64>,
    /// `-Xbeam` (mm).
    pub xbeam_mm: Option<f64>,
    /// `-Ybeam` (mm).
    pub ybeam_mm: Option<f64>,
    /// `-Xclose` (mm).
    pub xclose_mm: Option<f64>,
    /// `-Yclose` (mm).
    pub yclose_mm: Option<f64>,
    /// `-ORGX` (pixels).
    pub orgx_px: Option<f64>,
    /// `-ORGY` (pixels).
    pub orgy_px: Option<f64>,
    /// Final pivot after all flags (and before the convention forces one).
    pub pivot: Pivot,
    /// Beam-centre convention.
    pub convention: Convention,
    /// `-fdet_vector` (used when `convention` is `Custom`).
    pub fdet: [f64; 3],
    /// `-sdet_vector`.
    pub sdet: [f64; 3],
    /// `-odet_vector`.
    pub odet: [f64; 3],
    /// `-beam_vector`.
    pub beam: [f64; 3],
    /// `-polar_vector`.
    pub polar: [f64; 3],
    /// `-spindle_axis`.
    pub spindle: [f64; 3],
    /// `-twotheta_axis`.
    pub twotheta_axis: [f64; 3],
    /// `-pix0_vector` (m). Read but overwritten by the pivot computation, as in C.
    pub pix0: Option<[f64; 3]>,
    /// `-detector_rotx` (deg).
    pub rotx_deg: f64,
    /// `-detector_roty` (deg).
    pub roty_deg: f64,
    /// `-detector_rotz` (deg).
    pub rotz_deg: f64,
    /// `-twotheta` (deg).
    pub twotheta_deg: f64,
    /// `-curved_det`.
    pub curved: bool,
    /// `-point_pixel`.
    pub point_pixel: bool,
    /// `-detector_abs` attenuation depth (µm); `Some(None)` means "inf"/0: no absorption.
    pub attenuation_um: Option<Option<f64>>,
    /// `-detector_thick` (µm).
    pub thick_um: f64,
    /// `-detector_thicksteps` / `-thicksteps`.
    pub thicksteps: i64,
    /// `-roi xmin xmax ymin ymax` (pixels, inclusive).
    pub roi: Option<[i64; 4]>,
    /// Mask pixels (non-zero = render), fast index fastest, from `-mask`.
    pub mask: Option<Vec<u16>>,
    /// The panels of a multi-panel detector (`-expt`); empty: the one panel
    /// the fields above describe.
    pub panels: Vec<PanelConfig>,
}

/// One flat panel of a multi-panel detector, in the laboratory frame of the
/// beam vector (as a DIALS experiment list gives it). The sensor (thickness,
/// attenuation) and sampling are the detector's.
#[derive(Debug, Clone, PartialEq)]
pub struct PanelConfig {
    /// The panel's name (for messages and statistics).
    pub name: String,
    /// Sample to the outer corner of the first pixel (mm).
    pub origin_mm: [f64; 3],
    /// Direction of increasing fast pixel index (unit).
    pub fast: [f64; 3],
    /// Direction of increasing slow pixel index (unit).
    pub slow: [f64; 3],
    /// Pixel edge (mm); square pixels.
    pub pixel_mm: f64,
    /// Pixels along fast.
    pub fpixels: usize,
    /// Pixels along slow.
    pub spixels: usize,
    /// Where its pixels lie in the written image (fast, slow index of its
    /// first pixel), as a CrystFEL geometry's `min_fs`/`min_ss` say; `None`
    /// for every panel: the panels are stacked along slow in their order.
    pub data_origin: Option<[usize; 2]>,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        Self {
            pixel_mm: 0.1,
            fpixels: 0,
            spixels: 0,
            detsize_f_mm: 102.4,
            detsize_s_mm: 102.4,
            distance_mm: 100.0,
            close_distance_mm: None,
            xbeam_mm: None,
            ybeam_mm: None,
            xclose_mm: None,
            yclose_mm: None,
            orgx_px: None,
            orgy_px: None,
            pivot: Pivot::Beam,
            convention: Convention::Mosflm,
            fdet: [0.0, 0.0, 1.0],
            sdet: [0.0, -1.0, 0.0],
            odet: [1.0, 0.0, 0.0],
            beam: [1.0, 0.0, 0.0],
            polar: [0.0, 0.0, 1.0],
            spindle: [0.0, 0.0, 1.0],
            twotheta_axis: [0.0, 0.0, -1.0],
            pix0: None,
            rotx_deg: 0.0,
            roty_deg: 0.0,
            rotz_deg: 0.0,
            twotheta_deg: 0.0,
            curved: false,
            point_pixel: false,
            attenuation_um: None,
            thick_um: 0.0,
            thicksteps: -1,
            roi: None,
            mask: None,
            panels: Vec::new(),
        }
    }
}

/// Beam, divergence and spectrum as given on the command line.
#[derive(Debug, Clone, PartialEq)]
pub struct BeamConfig {
    /// `-lambda`/`-wave` (Å), or from `-energy`.
    pub lambda_a: f64,
    /// `-fluence` (photons/m²).
    pub fluence: f64,
    /// `-flux` (photons/s); 0 = not given.
    pub flux: f64,
    /// `-exposure` (s).
    pub exposure_s: f64,
    /// `-beamsize` (mm).
    pub beamsize_mm: f64,
    /// `-polar` Kahn polarization factor (C default 0: unpolarized).
    pub kahn_factor: f64,
    /// `-nopolar`.
    pub nopolar: bool,
    /// `-hdivrange` (mrad); negative = unset.
    pub hdivrange_mrad: f64,
    /// `-vdivrange` (mrad); negative = unset.
    pub vdivrange_mrad: f64,
    /// `-hdivstep` (mrad); negative = unset.
    pub hdivstep_mrad: f64,
    /// `-vdivstep` (mrad); negative = unset.
    pub vdivstep_mrad: f64,
    /// `-hdivsteps`; negative = unset.
    pub hdivsteps: i64,
    /// `-vdivsteps`; negative = unset.
    pub vdivsteps: i64,
    /// `-round_div` (default) or `-square_div`.
    pub round_div: bool,
    /// `-dispersion` (percent).
    pub dispersion_pct: f64,
    /// `-dispsteps`; negative = unset.
    pub dispsteps: i64,
    /// `-sourcefile` rows: X Y Z (m), weight, lambda (m); NaN = missing column.
    pub sources: Option<Vec<[f64; 5]>>,
    /// `-source_distance` (m) for generated and defaulted sources.
    pub source_distance_m: f64,
    /// `-spectrum` lines: wavelength (Å) and weight (a fraction of the
    /// fluence once normalised by the sum of the weights).
    pub spectrum: Option<Vec<[f64; 2]>>,
    /// `-lambda_offset` (Å): added to every source wavelength after
    /// `-lambda_scale` (λ' = offset + scale · λ, diffBragg's two wavelength
    /// coefficients).
    pub lambda_offset_a: f64,
    /// `-lambda_scale`: multiplies every source wavelength (1 = unchanged).
    pub lambda_scale: f64,
}

impl Default for BeamConfig {
    fn default() -> Self {
        Self {
            lambda_a: 1.0,
            fluence: 125932015286227086360700780544.0,
            flux: 0.0,
            exposure_s: 1.0,
            beamsize_mm: 0.1,
            kahn_factor: 0.0,
            nopolar: false,
            hdivrange_mrad: -1.0,
            vdivrange_mrad: -1.0,
            hdivstep_mrad: -1.0,
            vdivstep_mrad: -1.0,
            hdivsteps: -1,
            vdivsteps: -1,
            round_div: true,
            dispersion_pct: 0.0,
            dispsteps: -1,
            sources: None,
            source_distance_m: 10.0,
            spectrum: None,
            lambda_offset_a: 0.0,
            lambda_scale: 1.0,
        }
    }
}

/// Crystal lattice, orientation, size and motion as given on the command line.
#[derive(Debug, Clone, PartialEq)]
pub struct CrystalConfig {
    /// `-cell a b c alpha beta gamma` (Å, deg); values not given are 0.
    pub cell: Option<[f64; 6]>,
    /// `-mat`: reciprocal vectors a*, b*, c* (rows of the MOSFLM matrix are x, y, z;
    /// here stored as `[a_star, b_star, c_star]`), still multiplied by lambda.
    pub mat: Option<[[f64; 3]; 3]>,
    /// The cell's real-space vectors a, b, c in the laboratory frame (Å),
    /// from `-expt`; they give the orientation (and, without `-cell`, the
    /// cell) instead of `-mat`.
    pub real_space_a: Option<[[f64; 3]; 3]>,
    /// `-misset`.
    pub misset: Misset,
    /// `-misset_seed` (C default: the noise seed).
    pub misset_seed: Option<i64>,
    /// `-Na` (unit cells along a).
    pub na: f64,
    /// `-Nb`.
    pub nb: f64,
    /// `-Nc`.
    pub nc: f64,
    /// Crystal size along a, b, c (mm) from `-samplesize`/`-xtalsize` and variants; 0 = unset.
    pub size_mm: [f64; 3],
    /// `-mosaic` spread (deg); negative = unset.
    pub mosaic_deg: f64,
    /// `-mosaic_domains`; non-positive = unset.
    pub mosaic_domains: i64,
    /// `-mosaic_seed` (C default 12345678).
    pub mosaic_seed: i64,
    /// `-phi` start (deg).
    pub phi0_deg: f64,
    /// `-osc` range (deg); negative = unset.
    pub osc_deg: f64,
    /// `-phistep` (deg); negative = unset.
    pub phistep_deg: f64,
    /// `-phisteps`; negative = unset.
    pub phisteps: i64,
    /// Lattice transform shape.
    pub shape: CrystalShape,
    /// `-fudge` factor on the spot radius.
    pub fudge: f64,
}

impl Default for CrystalConfig {
    fn default() -> Self {
        Self {
            cell: None,
            mat: None,
            real_space_a: None,
            misset: Misset::None,
            misset_seed: None,
            na: 1.0,
            nb: 1.0,
            nc: 1.0,
            size_mm: [0.0; 3],
            mosaic_deg: -1.0,
            mosaic_domains: -1,
            mosaic_seed: 12345678,
            phi0_deg: 0.0,
            osc_deg: -1.0,
            phistep_deg: -1.0,
            phisteps: -1,
            shape: CrystalShape::Square,
            fudge: 1.0,
        }
    }
}

/// Where structure factors come from.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum SfSource {
    /// Only `-default_F`.
    #[default]
    None,
    /// Entries of an `-hkl` text file (shared by the configurations cloned
    /// from one, such as the shots of a batch).
    Hkl(std::sync::Arc<Vec<HklEntry>>),
    /// A grid re-read from an Fdump file.
    Dump(crate::sf::HklGrid),
}

/// Structure factors, sampling and background.
#[derive(Debug, Clone, PartialEq)]
pub struct SfConfig {
    /// The structure factor source.
    pub source: SfSource,
    /// `-default_F`.
    pub default_f: f64,
    /// `-interpolate` (Some(true)), `-nointerpolate` (Some(false)), or automatic.
    pub interpolate: Option<bool>,
}

impl Default for SfConfig {
    fn default() -> Self {
        Self { source: SfSource::None, default_f: 0.0, interpolate: None }
    }
}

/// Sub-pixel sampling and other render options.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingConfig {
    /// `-oversample`; non-positive = automatic.
    pub oversample: i64,
    /// `-oversample_omega`.
    pub oversample_omega: bool,
    /// `-oversample_polar`.
    pub oversample_polar: bool,
    /// `-oversample_thick`.
    pub oversample_thick: bool,
    /// `-dmin` (Å); 0 = no cut.
    pub dmin_a: f64,
    /// `-water` droplet size (µm).
    pub water_um: f64,
    /// Opt-in corrected physics (see docs/compat.md); false reproduces nanoBragg.c.
    pub corrected: bool,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self {
            oversample: -1,
            oversample_omega: false,
            oversample_polar: false,
            oversample_thick: false,
            dmin_a: 0.0,
            water_um: 0.0,
            corrected: false,
        }
    }
}

/// Everything that determines the rendered float image.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SimConfig {
    /// Detector geometry.
    pub detector: DetectorConfig,
    /// Beam and sources.
    pub beam: BeamConfig,
    /// Crystal.
    pub crystal: CrystalConfig,
    /// Structure factors.
    pub sf: SfConfig,
    /// Sampling.
    pub sampling: SamplingConfig,
    /// An amorphous sample whose diffuse scattering is added to the image
    /// (`-stol` and the sample flags); `None`: no such background.
    pub amorphous: Option<AmorphousConfig>,
}

/// The amorphous sample around the crystal (water, air, ice, oil), as the
/// user gave it: a table of its structure factor against sin θ/λ and its
/// size and composition. Its scattering is computed as nonBragg.c does
/// (see [`crate::amorphous`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AmorphousConfig {
    /// Table rows `[x, F]` as read (x in the file's unit), F NaN where
    /// missing.
    pub rows: Vec<[f64; 2]>,
    /// What turns the file's x into sin θ/λ in 1/m: 1e10 for sin θ/λ in
    /// Å⁻¹ (`-stol`), 1e10/4 for 4 sin θ/λ... (as nonBragg.c's flags).
    pub to_stol: f64,
    /// Thickness along the beam, height and width (mm); height and width
    /// are clipped to `-beamsize`.
    pub size_mm: [f64; 3],
    /// Density (g/cm³).
    pub density_g_cm3: f64,
    /// Molecular weight (g/mol).
    pub molecular_weight: f64,
    /// Number of molecules in the beam; replaces the density when given.
    pub molecules: Option<f64>,
}

impl AmorphousConfig {
    /// A table with nonBragg.c's default sample: a 0.1 mm cube of
    /// 1 g/cm³, 18 g/mol (water).
    pub fn new(rows: Vec<[f64; 2]>, to_stol: f64) -> Self {
        AmorphousConfig {
            rows,
            to_stol,
            size_mm: [0.1; 3],
            density_g_cm3: 1.0,
            molecular_weight: 18.0,
            molecules: None,
        }
    }
}
