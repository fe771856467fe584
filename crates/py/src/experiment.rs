//! The experiment as Python objects that mirror the core's configuration:
//! `Beam` (`BeamConfig`), `Crystal` (`CrystalConfig` and its structure
//! factors, `SfConfig`), `Detector` (`DetectorConfig`, with `Panel`s) and
//! `Experiment`, which holds one of each and the sampling. Attributes have
//! the config fields' names, units in them. `from_args` builds the same
//! objects from a command line, and `Experiment.to_args` writes the
//! command line back where one exists.

use crate::fields::{self, field, Field, Value};
use crate::{error, pyerr};
use nanobragg_core::config::{
    BeamConfig, CrystalConfig, DetectorConfig, PanelConfig, SfConfig, SfSource, SimConfig,
};
use nanobragg_pipeline::invocation::Invocation;
use nanobragg_pipeline::parameters::PANEL_PARAMS;
use nanobragg_pipeline::{Parameters, Target};
use numpy::PyArrayMethods;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;

/// The X-ray beam: wavelength or spectrum, fluence (or flux, exposure and
/// beam size), polarization, divergence and dispersion.
#[pyclass(module = "nanobragg._nanobragg")]
#[derive(Clone, Default)]
pub struct Beam {
    pub(crate) cfg: BeamConfig,
    /// `-sourcefile` and `-spectrum`, where the values came from them.
    source_path: Option<PathBuf>,
    spectrum_path: Option<PathBuf>,
}

static BEAM: &[Field<BeamConfig>] = &[
    field!("lambda_a", "wavelength (Å)", c => c.lambda_a),
    field!("fluence", "incident photons per m² (unless flux is given)", c => c.fluence),
    field!("flux", "incident photons per second; with exposure_s and beamsize_mm it sets the fluence (0: use fluence)", c => c.flux),
    field!("exposure_s", "exposure time (s), used with flux", c => c.exposure_s),
    field!("beamsize_mm", "beam width (mm), used with flux; clips a larger crystal", c => c.beamsize_mm),
    field!("kahn_factor", "Kahn polarization factor (0: unpolarized)", c => c.kahn_factor),
    field!("nopolar", "no polarization correction", c => c.nopolar),
    field!("hdivrange_mrad", "horizontal divergence range (mrad; negative: not given)", c => c.hdivrange_mrad),
    field!("vdivrange_mrad", "vertical divergence range (mrad; negative: not given)", c => c.vdivrange_mrad),
    field!("hdivstep_mrad", "horizontal divergence step (mrad; negative: from the range)", c => c.hdivstep_mrad),
    field!("vdivstep_mrad", "vertical divergence step (mrad; negative: from the range)", c => c.vdivstep_mrad),
    field!("hdivsteps", "horizontal divergence steps (negative: automatic)", c => c.hdivsteps),
    field!("vdivsteps", "vertical divergence steps (negative: automatic)", c => c.vdivsteps),
    field!("round_div", "keep the divergence points inside the ellipse of the ranges", c => c.round_div),
    field!("dispersion_pct", "spectral width: full range of Δλ/λ (%)", c => c.dispersion_pct),
    field!("dispsteps", "wavelengths across the spectral width (negative: automatic)", c => c.dispsteps),
    field!("spectrum", "[(wavelength Å, weight), ...] replacing lambda_a; the weights, normalised by their sum, are fractions of the fluence (None: lambda_a)", c => c.spectrum),
    field!("source_distance_m", "distance of generated sources from the sample (m)", c => c.source_distance_m),
    field!("lambda_offset_a", "added to every source wavelength after lambda_scale (Å)", c => c.lambda_offset_a),
    field!("lambda_scale", "multiplies every source wavelength", c => c.lambda_scale),
];

/// The crystal: cell or orientation matrix, misset, size in cells or mm,
/// mosaicity, rotation, spot shape and structure factors.
#[pyclass(module = "nanobragg._nanobragg")]
#[derive(Clone, Default)]
pub struct Crystal {
    pub(crate) model: CrystalModel,
    /// `-hkl` and `-mat`, where the values came from them.
    hkl_path: Option<PathBuf>,
    mat_path: Option<PathBuf>,
    /// Structure factors set from arrays (no file holds them).
    pub(crate) sf_arrays: bool,
}

/// The crystal's model: the lattice and its structure factors.
#[derive(Clone, Default, PartialEq)]
pub struct CrystalModel {
    pub(crate) cfg: CrystalConfig,
    pub(crate) sf: SfConfig,
}

/// A row for one of the cell's six values.
macro_rules! cell_field {
    ($k:literal, $name:literal, $doc:literal) => {
        Field {
            name: $name,
            doc: $doc,
            get: |c: &CrystalModel, py| c.cfg.cell.map(|cell| cell[$k]).to_py(py),
            set: |c: &mut CrystalModel, v| {
                let x = f64::from_py(v).map_err(|e| fields::named($name, e))?;
                c.cfg.cell.get_or_insert([0.0; 6])[$k] = x;
                Ok(())
            },
        }
    };
}

static CRYSTAL: &[Field<CrystalModel>] = &[
    field!("cell", "(a, b, c, alpha, beta, gamma) in Å and degrees (None: from mat)", c => c.cfg.cell),
    cell_field!(0, "cell_a", "cell edge a (Å)"),
    cell_field!(1, "cell_b", "cell edge b (Å)"),
    cell_field!(2, "cell_c", "cell edge c (Å)"),
    cell_field!(3, "cell_alpha", "cell angle alpha (deg)"),
    cell_field!(4, "cell_beta", "cell angle beta (deg)"),
    cell_field!(5, "cell_gamma", "cell angle gamma (deg)"),
    Field {
        name: "mat",
        doc: "reciprocal vectors (a*, b*, c*) times the wavelength, as a MOSFLM matrix's columns (None: from cell); setting it clears real_space_a, as -mat does",
        get: |c, py| c.cfg.mat.to_py(py),
        set: |c, v| {
            c.cfg.mat = Value::from_py(v).map_err(|e| fields::named("mat", e))?;
            if c.cfg.mat.is_some() {
                c.cfg.real_space_a = None;
            }
            Ok(())
        },
    },
    field!("real_space_a", "the cell's real-space vectors (a, b, c) in the laboratory frame (Å), as an .expt gives them (None: not given)", c => c.cfg.real_space_a),
    field!("misset", "rotations about x, y, z (deg, in that order), \"random\", or None", c => c.cfg.misset),
    field!("misset_seed", "seed of a random misset (None: the clock)", c => c.cfg.misset_seed),
    Field {
        name: "N",
        doc: "unit cells along a, b and c: one number for all three, or (Na, Nb, Nc)",
        get: |c, py| match (c.cfg.na, c.cfg.nb, c.cfg.nc) {
            (a, b, c) if a == b && b == c => a.to_py(py),
            (a, b, c) => [a, b, c].to_py(py),
        },
        set: |c, v| {
            let one = v.extract::<f64>().is_ok();
            let n = match one {
                true => [f64::from_py(v).map_err(|e| fields::named("N", e))?; 3],
                false => <[f64; 3]>::from_py(v).map_err(|e| fields::named("N", e))?,
            };
            [c.cfg.na, c.cfg.nb, c.cfg.nc] = n;
            Ok(())
        },
    },
    field!("Na", "unit cells along a (need not be whole)", c => c.cfg.na),
    field!("Nb", "unit cells along b", c => c.cfg.nb),
    field!("Nc", "unit cells along c", c => c.cfg.nc),
    field!("size_mm", "crystal size along a, b, c (mm; 0: from N)", c => c.cfg.size_mm),
    field!("mosaic_deg", "isotropic mosaic spread (deg; negative: none)", c => c.cfg.mosaic_deg),
    field!("mosaic_domains", "mosaic domains (non-positive: automatic)", c => c.cfg.mosaic_domains),
    field!("mosaic_seed", "seed of the mosaic domains", c => c.cfg.mosaic_seed),
    field!("phi0_deg", "spindle angle at the start of the exposure (deg)", c => c.cfg.phi0_deg),
    field!("osc_deg", "spindle rotation during the exposure (deg; negative: none)", c => c.cfg.osc_deg),
    field!("phistep_deg", "spindle step (deg; negative: from osc_deg and phisteps)", c => c.cfg.phistep_deg),
    field!("phisteps", "spindle steps (negative: automatic)", c => c.cfg.phisteps),
    field!("shape", "lattice transform: \"square\", \"round\", \"gauss\" or \"tophat\"", c => c.cfg.shape),
    field!("fudge", "factor on the spot size of gauss and tophat", c => c.cfg.fudge),
    field!("default_F", "structure factor of every reflection no table gives", c => c.sf.default_f),
    field!("interpolate", "tricubic interpolation of the structure factors: True, False or None (automatic)", c => c.sf.interpolate),
];

/// The detector: a flat (or curved) detector placed by distance, pixel
/// size and count and beam centre under a convention, or the panels of a
/// DIALS experiment list or CrystFEL geometry; its sensor; and the beam,
/// polarization and spindle directions (which the conventions set).
#[pyclass(module = "nanobragg._nanobragg")]
#[derive(Clone, Default)]
pub struct Detector {
    pub(crate) cfg: DetectorConfig,
    /// The `-expt`/`-geom` files read, and the `-mask`/`-img` images.
    files: Vec<(PathBuf, nanobragg_pipeline::expt::DetectorFile)>,
    mask_path: Option<PathBuf>,
    img_path: Option<PathBuf>,
    img_size: Option<(usize, usize)>,
    header_values: Vec<(&'static str, String, f64)>,
}

/// A row for a detector vector, whose flag also selects the custom
/// convention.
macro_rules! custom_field {
    ($name:literal, $doc:literal, $f:ident) => {
        Field {
            name: $name,
            doc: $doc,
            get: |c: &DetectorConfig, py| c.$f.to_py(py),
            set: |c: &mut DetectorConfig, v| {
                c.$f = Value::from_py(v).map_err(|e| fields::named($name, e))?;
                c.convention = nanobragg_core::config::Convention::Custom;
                Ok(())
            },
        }
    };
}

static DETECTOR: &[Field<DetectorConfig>] = &[
    field!("distance_mm", "sample to the direct-beam spot along the beam (mm)", c => c.distance_mm),
    field!("close_distance_mm", "sample to the nearest point of the detector plane (mm; None: from distance_mm)", c => c.close_distance_mm),
    field!("pixel_mm", "pixel size (mm)", c => c.pixel_mm),
    field!("fpixels", "pixels along the fast axis (0: from detsize_f_mm)", c => c.fpixels),
    field!("spixels", "pixels along the slow axis (0: from detsize_s_mm)", c => c.spixels),
    field!("detsize_f_mm", "size along the fast axis (mm), where fpixels is 0", c => c.detsize_f_mm),
    field!("detsize_s_mm", "size along the slow axis (mm), where spixels is 0", c => c.detsize_s_mm),
    field!("xbeam_mm", "direct-beam spot along the fast axis (mm, in the convention; None: the centre)", c => c.xbeam_mm),
    field!("ybeam_mm", "direct-beam spot along the slow axis (mm; None: the centre)", c => c.ybeam_mm),
    field!("xclose_mm", "fast position of the point nearest the sample (mm)", c => c.xclose_mm),
    field!("yclose_mm", "slow position of the point nearest the sample (mm)", c => c.yclose_mm),
    field!("orgx_px", "XDS ORGX (pixels)", c => c.orgx_px),
    field!("orgy_px", "XDS ORGY (pixels)", c => c.orgy_px),
    field!("convention", "\"mosflm\", \"xds\", \"dials\", \"adxv\", \"denzo\" or \"custom\" (the vectors below)", c => c.convention),
    field!("pivot", "what rotations keep: \"beam\" (the beam spot) or \"sample\" (the nearest point)", c => c.pivot),
    custom_field!("fdet", "fast axis; setting it selects the custom convention, as its flag does", fdet),
    custom_field!("sdet", "slow axis; setting it selects the custom convention, as its flag does", sdet),
    custom_field!("odet", "detector normal; setting it selects the custom convention, as its flag does", odet),
    custom_field!("beam", "beam direction; setting it selects the custom convention, as its flag does", beam),
    custom_field!("polar", "direction of the X-ray electric field; setting it selects the custom convention, as its flag does", polar),
    custom_field!("spindle", "spindle axis; setting it selects the custom convention, as its flag does", spindle),
    custom_field!("twotheta_axis", "axis of the two-theta swing; setting it selects the custom convention, as its flag does", twotheta_axis),
    custom_field!("pix0", "first pixel's position (m): setting it selects the custom convention (the position is recomputed from the beam centre, as in nanoBragg)", pix0),
    field!("rotx_deg", "rotation about x (deg)", c => c.rotx_deg),
    field!("roty_deg", "rotation about y, after x (deg)", c => c.roty_deg),
    field!("rotz_deg", "rotation about z, after x and y (deg)", c => c.rotz_deg),
    field!("twotheta_deg", "swing about twotheta_axis (deg)", c => c.twotheta_deg),
    field!("curved", "every pixel at the same distance from the sample", c => c.curved),
    field!("point_pixel", "pixels as points: solid angle 1/r², no obliquity", c => c.point_pixel),
    Field {
        name: "attenuation_um",
        doc: "sensor attenuation depth (µm; inf: no absorption; None: not given)",
        get: |c, py| match c.attenuation_um {
            None => Ok(py.None()),
            Some(None) => f64::INFINITY.to_py(py),
            Some(Some(d)) => d.to_py(py),
        },
        set: |c, v| {
            c.attenuation_um = match v.is_none() {
                true => None,
                false => {
                    let d: f64 = v.extract().map_err(|e| fields::named("attenuation_um", e))?;
                    match d {
                        d if d == f64::INFINITY || d == 0.0 => Some(None),
                        d if d.is_finite() && d > 0.0 => Some(Some(d)),
                        d => {
                            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                                "attenuation_um: {d} is not a depth (µm > 0, inf or 0: none)"
                            )))
                        }
                    }
                }
            };
            Ok(())
        },
    },
    field!("thick_um", "sensor thickness (µm)", c => c.thick_um),
    field!("thicksteps", "sensor layers (negative: automatic)", c => c.thicksteps),
    field!("roi", "(xmin, xmax, ymin, ymax) pixels rendered, inclusive (None: all)", c => c.roi),
    Field {
        name: "panels",
        doc: "the panels of a multi-panel detector, a tuple of Panel; assign a list or tuple to change them (empty: the one flat detector the other attributes describe)",
        get: |c, py| {
            let panels = c.panels.iter().map(|p| Py::new(py, Panel { cfg: p.clone() }));
            Ok(pyo3::types::PyTuple::new(py, panels.collect::<PyResult<Vec<_>>>()?)?.into_any().unbind())
        },
        set: |c, v| {
            let panels: Vec<PyRef<'_, Panel>> = v
                .extract()
                .map_err(|_| pyo3::exceptions::PyTypeError::new_err("panels: a list of nanobragg.Panel"))?;
            c.panels = panels.iter().map(|p| p.cfg.clone()).collect();
            Ok(())
        },
    },
];

/// One flat panel of a multi-panel detector in the laboratory frame of
/// the beam vector (as an .expt gives it). Frozen: make a changed one with
/// `replace`.
#[pyclass(frozen, module = "nanobragg._nanobragg")]
#[derive(Clone)]
pub struct Panel {
    cfg: PanelConfig,
}

static PANEL: &[Field<PanelConfig>] = &[
    field!("name", "the panel's name", c => c.name),
    field!("origin_mm", "sample to the outer corner of the first pixel (mm)", c => c.origin_mm),
    field!("fast", "direction of increasing fast index (unit)", c => c.fast),
    field!("slow", "direction of increasing slow index (unit)", c => c.slow),
    field!("pixel_mm", "pixel edge (mm)", c => c.pixel_mm),
    field!("fpixels", "pixels along fast", c => c.fpixels),
    field!("spixels", "pixels along slow", c => c.spixels),
    field!("data_origin", "(fast, slow) of its first pixel in the written image (None: panels stacked along slow)", c => c.data_origin),
];

/// The experiment's own attributes: the sampling and the noise seed.
static EXPERIMENT: &[Field<Invocation>] = &[
    field!("oversample", "sub-pixels per pixel along each axis (non-positive: automatic)", c => c.config.sampling.oversample),
    field!("oversample_omega", "solid angle per sub-pixel", c => c.config.sampling.oversample_omega),
    field!("oversample_polar", "polarization per sub-pixel", c => c.config.sampling.oversample_polar),
    field!("oversample_thick", "sensor absorption per sub-pixel", c => c.config.sampling.oversample_thick),
    field!("dmin_a", "no scattering beyond this resolution (Å; 0: no limit)", c => c.config.sampling.dmin_a),
    field!("water_um", "water around the crystal, added as background (µm)", c => c.config.sampling.water_um),
    field!("corrected", "corrected physics where nanoBragg.c has known errors", c => c.config.sampling.corrected),
    field!("seed", "seed of the noise image (None: the clock)", c => c.seed),
];

/// The methods every part shares: keywords, attributes, `repr`, `dir`, `==`.
macro_rules! part_methods {
    ($t:ident, $what:literal, $table:expr, $always:expr, $hidden:expr, { $($extra:item)* }) => {
        #[pymethods]
        impl $t {
            #[new]
            #[pyo3(signature = (**kwargs))]
            fn new(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
                let mut part = $t::default();
                fields::set_keywords(part.model_mut(), $table, $what, kwargs)?;
                Ok(part)
            }

            fn __getattr__(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
                (fields::find($table, $what, name)?.get)(self.model(), py)
            }

            fn __setattr__(&mut self, name: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
                (fields::find($table, $what, name)?.set)(self.model_mut(), value)
            }

            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                let default = $t::default();
                fields::repr(py, $what, self.model(), Some(default.model()), $table, $always, $hidden)
            }

            fn __dir__(&self) -> Vec<String> {
                fields::names($table, &["help"])
            }

            fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
                other.cast::<$t>().is_ok_and(|o| self.model() == o.borrow().model())
            }

            fn __copy__(&self) -> Self {
                self.clone()
            }

            fn __deepcopy__(&self, _memo: &Bound<'_, PyAny>) -> Self {
                self.clone()
            }

            /// The attributes, one line each: name, meaning and unit.
            #[staticmethod]
            fn help() -> String {
                fields::help($table)
            }

            $($extra)*
        }
    };
}

impl Beam {
    fn model(&self) -> &BeamConfig {
        &self.cfg
    }
    fn model_mut(&mut self) -> &mut BeamConfig {
        &mut self.cfg
    }
}
part_methods!(Beam, "Beam", BEAM, &["lambda_a", "fluence"], &[], {});

impl Crystal {
    fn model(&self) -> &CrystalModel {
        &self.model
    }
    fn model_mut(&mut self) -> &mut CrystalModel {
        &mut self.model
    }

    /// Use structure factors set from arrays (no file holds them).
    pub(crate) fn set_arrays(&mut self, source: SfSource) {
        self.model.sf.source = source;
        self.hkl_path = None;
        self.sf_arrays = true;
    }
}
part_methods!(
    Crystal,
    "Crystal",
    CRYSTAL,
    &["cell", "N", "default_F"],
    // (the cell and N rows show them whole)
    &["cell_a", "cell_b", "cell_c", "cell_alpha", "cell_beta", "cell_gamma", "Na", "Nb", "Nc"],
    {}
);

impl Detector {
    fn model(&self) -> &DetectorConfig {
        &self.cfg
    }
    fn model_mut(&mut self) -> &mut DetectorConfig {
        &mut self.cfg
    }
}
part_methods!(
    Detector,
    "Detector",
    DETECTOR,
    &["distance_mm", "pixel_mm", "fpixels", "spixels"],
    &[],
    {
        /// The detector of a DIALS experiment list (its panels, in the frame of
        /// its beam); `from_args(["-expt", path])` also takes its beam and
        /// crystal.
        #[staticmethod]
        fn from_expt(path: PathBuf) -> PyResult<Detector> {
            Detector::from_file("-expt", path)
        }

        /// The detector of a CrystFEL geometry file (its panels).
        #[staticmethod]
        fn from_geom(path: PathBuf) -> PyResult<Detector> {
            Detector::from_file("-geom", path)
        }
    }
);

impl Detector {
    fn from_file(flag: &str, path: PathBuf) -> PyResult<Detector> {
        let args = [flag.to_string(), path.display().to_string()];
        let mut inv = nanobragg_pipeline::parse_args(&args).map_err(error)?;
        if let Some((path, n)) = &inv.expt_shots {
            return Err(error(format!(
                "{flag} {}: {n} experiments; a Detector is one experiment's (dials.split_experiments writes them apart)",
                path.display()
            )));
        }
        Ok(split(&mut inv).2)
    }
}

#[pymethods]
impl Panel {
    #[new]
    #[pyo3(signature = (**kwargs))]
    fn new(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut cfg = PanelConfig {
            name: String::new(),
            origin_mm: [0.0; 3],
            fast: [1.0, 0.0, 0.0],
            slow: [0.0, -1.0, 0.0],
            pixel_mm: 0.1,
            fpixels: 0,
            spixels: 0,
            data_origin: None,
        };
        fields::set_keywords(&mut cfg, PANEL, "Panel", kwargs)?;
        Ok(Panel { cfg })
    }

    /// A copy with the keywords' values.
    #[pyo3(signature = (**kwargs))]
    fn replace(&self, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut cfg = self.cfg.clone();
        fields::set_keywords(&mut cfg, PANEL, "Panel", kwargs)?;
        Ok(Panel { cfg })
    }

    fn __getattr__(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        (fields::find(PANEL, "Panel", name)?.get)(&self.cfg, py)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        fields::repr(py, "Panel", &self.cfg, None, PANEL, &[], &[])
    }

    fn __dir__(&self) -> Vec<String> {
        fields::names(PANEL, &["replace"])
    }

    /// Pickled as its values.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, (Py<PyDict>,))> {
        let values = PyDict::new(py);
        for f in PANEL {
            values.set_item(f.name, (f.get)(&self.cfg, py)?)?;
        }
        let restore = py.import("nanobragg._nanobragg")?.getattr("_restore_panel")?;
        Ok((restore, (values.unbind(),)))
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<Panel>().is_ok_and(|o| self.cfg == o.get().cfg)
    }
}

/// The parts of an invocation: its beam, crystal and detector with the
/// files they came from, leaving the rest (sampling, seeds, outputs).
fn split(inv: &mut Invocation) -> (Beam, Crystal, Detector) {
    let c = &inv.config;
    let beam = Beam {
        cfg: c.beam.clone(),
        source_path: inv.source_path.take(),
        spectrum_path: inv.spectrum_path.take(),
    };
    let crystal = Crystal {
        model: CrystalModel { cfg: c.crystal.clone(), sf: c.sf.clone() },
        hkl_path: inv.hkl_path.take(),
        mat_path: inv.mat_path.take(),
        sf_arrays: false,
    };
    let detector = Detector {
        cfg: c.detector.clone(),
        files: std::mem::take(&mut inv.detector_files),
        mask_path: inv.mask_path.take(),
        img_path: inv.img_path.take(),
        img_size: inv.img_size.take(),
        header_values: std::mem::take(&mut inv.header_values),
    };
    (beam, crystal, detector)
}

/// A simulation: a beam, a crystal and a detector, with the sampling and
/// the noise seed. Built from objects (`Experiment(beam=..., crystal=...,
/// detector=...)`) or from a command line (`from_args`); the parts are
/// shared, so `experiment.crystal.cell_a = 101` changes the experiment.
#[pyclass(module = "nanobragg._nanobragg")]
pub struct Experiment {
    beam: Py<Beam>,
    crystal: Py<Crystal>,
    detector: Py<Detector>,
    /// Everything else the command line gave (sampling, the amorphous
    /// sample, seeds, outputs, precision, threads, warnings).
    rest: Invocation,
}

impl Experiment {
    /// The experiment of a parsed command line.
    pub fn from_invocation(py: Python<'_>, mut inv: Invocation) -> PyResult<Experiment> {
        let (beam, crystal, detector) = split(&mut inv);
        Ok(Experiment {
            beam: Py::new(py, beam)?,
            crystal: Py::new(py, crystal)?,
            detector: Py::new(py, detector)?,
            rest: inv,
        })
    }

    /// The invocation the experiment renders as: its parts put together.
    pub fn inv(&self, py: Python<'_>) -> Invocation {
        let mut inv = self.rest.clone();
        let (b, c, d) = (self.beam.borrow(py), self.crystal.borrow(py), self.detector.borrow(py));
        inv.config.beam = b.cfg.clone();
        inv.source_path = b.source_path.clone();
        inv.spectrum_path = b.spectrum_path.clone();
        inv.config.crystal = c.model.cfg.clone();
        inv.config.sf = c.model.sf.clone();
        inv.hkl_path = c.hkl_path.clone();
        inv.mat_path = c.mat_path.clone();
        inv.config.detector = d.cfg.clone();
        inv.detector_files = d.files.clone();
        inv.mask_path = d.mask_path.clone();
        inv.img_path = d.img_path.clone();
        inv.img_size = d.img_size;
        inv.header_values = d.header_values.clone();
        inv
    }

    /// Puts a simulation's values back into the parts.
    pub fn store(&mut self, py: Python<'_>, cfg: SimConfig) {
        let SimConfig { detector, beam, crystal, sf, sampling, amorphous } = cfg;
        self.beam.borrow_mut(py).cfg = beam;
        self.crystal.borrow_mut(py).model = CrystalModel { cfg: crystal, sf };
        self.detector.borrow_mut(py).cfg = detector;
        (self.rest.config.sampling, self.rest.config.amorphous) = (sampling, amorphous);
    }

    /// A copy whose parts are copies (not shared with this one).
    pub fn deep_copy(&self, py: Python<'_>) -> PyResult<Experiment> {
        Ok(Experiment {
            beam: Py::new(py, self.beam.borrow(py).clone())?,
            crystal: Py::new(py, self.crystal.borrow(py).clone())?,
            detector: Py::new(py, self.detector.borrow(py).clone())?,
            rest: self.rest.clone(),
        })
    }

    /// The command line, and the structure factors set from arrays that
    /// it leaves out (the command line's own are read from its files).
    pub fn args_and_arrays(&self, py: Python<'_>) -> PyResult<(Vec<String>, Option<SfSource>)> {
        let mut inv = self.inv(py);
        let arrays = self
            .crystal
            .borrow(py)
            .sf_arrays
            .then(|| std::mem::replace(&mut inv.config.sf.source, SfSource::None));
        let args = nanobragg_pipeline::command_line::to_args(&inv).map_err(error)?;
        Ok((args, arrays))
    }

    /// The experiment of `args` with the structure factors `arrays`.
    fn parsed(py: Python<'_>, args: &[String], arrays: Option<SfSource>) -> PyResult<Experiment> {
        let inv = nanobragg_pipeline::parse_args(args).map_err(error)?;
        crate::one_image(&inv)?;
        let keep_arrays = inv.hkl_path.is_none();
        let e = Experiment::from_invocation(py, inv)?;
        if let Some(sf) = arrays.filter(|_| keep_arrays) {
            e.crystal.borrow_mut(py).set_arrays(sf);
        }
        Ok(e)
    }

    /// The experiment, planned (every panel's), or why it cannot be.
    pub fn check(&self, py: Python<'_>) -> Result<Parameters, String> {
        let inv = self.inv(py);
        let seeds = inv.seeds().setup;
        Parameters::of_targets(inv.config.clone(), seeds, Vec::new()).map_err(|e| {
            match e.downcast::<nanobragg_core::Error>() {
                // a setup error, named by the flag or file it comes from
                Ok(e) => format!("{:#}", nanobragg_pipeline::render::explain(e, &inv)),
                Err(e) => format!("{e:#}"),
            }
        })
    }

    /// `names` of this experiment as numbers.
    pub fn chosen(&self, py: Python<'_>, names: &[String]) -> PyResult<Parameters> {
        let params = self.targets(py, names)?;
        let inv = self.inv(py);
        Parameters::of_targets(inv.config.clone(), inv.seeds().setup, params)
            .map_err(|e| error(format!("{e:#}")))
    }

    /// The one parameter `name` names (not `NAME@*`, which names one per
    /// panel).
    fn chosen_one(&self, py: Python<'_>, name: &str) -> PyResult<Parameters> {
        let p = self.chosen(py, &[name.to_string()])?;
        match p.params() {
            [_] => Ok(p),
            all => Err(error(format!(
                "{name} names {} parameters, one per panel: use NAME@K (here {})",
                all.len(),
                all.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// `names` as parameters, in order (`NAME@K`: panel `K`'s, `NAME@*`:
    /// every panel's).
    pub fn targets(&self, py: Python<'_>, names: &[String]) -> PyResult<Vec<Target>> {
        let d = self.detector.borrow(py);
        let panels: Vec<String> = d.cfg.panels.iter().map(|p| p.name.clone()).collect();
        let mut out = Vec::new();
        for n in names {
            out.extend(Target::parse_list(n, &panels).map_err(|e| error(format!("{e:#}")))?);
        }
        Ok(out)
    }

    /// Sets the parameters `p` to `values` (the config they give), keeping
    /// the automatic oversampling automatic.
    pub fn set_values(&mut self, py: Python<'_>, p: &Parameters, values: &[f64]) -> PyResult<()> {
        let oversample = self.rest.config.sampling.oversample;
        let mut cfg = p.config(values).map_err(|e| error(format!("{e:#}")))?;
        cfg.sampling.oversample = oversample;
        self.store(py, cfg);
        Ok(())
    }

    /// Structure factors set from arrays, for `Params(F=...)`.
    pub fn set_sf_source(&self, py: Python<'_>, source: SfSource) {
        self.crystal.borrow_mut(py).set_arrays(source);
    }

    /// The invocation's warnings.
    pub fn warnings(&self) -> &[String] {
        &self.rest.warnings
    }
}

/// A pickled experiment: the flags of its files and settings, the
/// structure factors set from arrays (h, k, l, F) and its attributes'
/// values (part, name, value).
type ExperimentState = (Vec<String>, Option<Vec<[f64; 4]>>, Vec<(String, String, Py<PyAny>)>);

#[pymethods]
impl Experiment {
    #[new]
    #[pyo3(signature = (beam = None, crystal = None, detector = None, **kwargs))]
    fn new(
        py: Python<'_>,
        beam: Option<Py<Beam>>,
        crystal: Option<Py<Crystal>>,
        detector: Option<Py<Detector>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let mut rest = Invocation::default();
        fields::set_keywords(&mut rest, EXPERIMENT, "Experiment", kwargs)?;
        Ok(Experiment {
            beam: beam.map_or_else(|| Py::new(py, Beam::default()), Ok)?,
            crystal: crystal.map_or_else(|| Py::new(py, Crystal::default()), Ok)?,
            detector: detector.map_or_else(|| Py::new(py, Detector::default()), Ok)?,
            rest,
        })
    }

    /// The beam (shared: changing it changes the experiment).
    #[getter]
    fn beam(&self, py: Python<'_>) -> Py<Beam> {
        self.beam.clone_ref(py)
    }

    /// The crystal and its structure factors (shared).
    #[getter]
    fn crystal(&self, py: Python<'_>) -> Py<Crystal> {
        self.crystal.clone_ref(py)
    }

    /// The detector (shared).
    #[getter]
    fn detector(&self, py: Python<'_>) -> Py<Detector> {
        self.detector.clone_ref(py)
    }

    fn __getattr__(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        (fields::find(EXPERIMENT, "Experiment", name)?.get)(&self.rest, py)
    }

    fn __setattr__(&mut self, name: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let wrong = |what: &str| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "Experiment.{name}: a nanobragg.{what}, not {}",
                value.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        };
        match name {
            "beam" => self.beam = value.extract().map_err(|_| wrong("Beam"))?,
            "crystal" => self.crystal = value.extract().map_err(|_| wrong("Crystal"))?,
            "detector" => self.detector = value.extract().map_err(|_| wrong("Detector"))?,
            _ => (fields::find(EXPERIMENT, "Experiment", name)?.set)(&mut self.rest, value)?,
        }
        Ok(())
    }

    fn __dir__(&self) -> Vec<String> {
        let methods = [
            "beam",
            "crystal",
            "detector",
            "to_args",
            "args",
            "shape",
            "parameters",
            "structure_factors",
            "set_structure_factors",
            "set_flags",
            "help",
        ];
        fields::names(EXPERIMENT, &methods)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let own = fields::repr(
            py,
            "Experiment",
            &self.rest,
            Some(&Invocation::default()),
            EXPERIMENT,
            &[],
            &[],
        )?;
        let own = own.trim_start_matches("nanobragg.Experiment(").trim_end_matches(')');
        let parts = [
            format!("beam={}", self.beam.bind(py).repr()?),
            format!("crystal={}", self.crystal.bind(py).repr()?),
            format!("detector={}", self.detector.bind(py).repr()?),
        ];
        let sep = if own.is_empty() { "" } else { ",\n    " };
        Ok(format!("nanobragg.Experiment(\n    {}{sep}{own})", parts.join(",\n    ")))
    }

    /// The experiment's own attributes (the parts have `help` of their own).
    #[staticmethod]
    fn help() -> String {
        fields::help(EXPERIMENT)
    }

    /// The `nanobragg` command line that renders this experiment (without
    /// output files), where one exists: raises `nanobragg.Error` naming the
    /// part no flag holds (structure factors set from arrays are left out:
    /// write them to an `-hkl` file).
    fn to_args(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        Ok(self.args_and_arrays(py)?.0)
    }

    /// `to_args()`, as the models of earlier versions named it.
    #[getter]
    fn args(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.to_args(py)
    }

    /// The image shape, (slow, fast) pixels.
    #[getter]
    fn shape(&self, py: Python<'_>) -> PyResult<(usize, usize)> {
        let [f, s] = self.check(py).map_err(error)?.image_size();
        Ok((s, f))
    }

    /// The value of a parameter (a `-gradient` name such as "distance",
    /// "cell_a", "misset_x", "lambda") in the unit of its flag, as the run
    /// uses it (defaults resolved).
    fn __getitem__(&self, py: Python<'_>, name: &str) -> PyResult<f64> {
        Ok(self.chosen_one(py, name)?.start()[0])
    }

    /// Set a parameter (in the unit of its flag) in the parts that hold it.
    fn __setitem__(&mut self, py: Python<'_>, name: &str, value: f64) -> PyResult<()> {
        let p = self.chosen_one(py, name)?;
        // what the flag takes (-fluence >= 0, a number for -polar, ...)
        if let Err(e) = nanobragg_pipeline::parameters::check_value(p.params()[0], value) {
            return Err(error(format!("{name} = {value:?}: {e:#}")));
        }
        let before = self.inv(py).config;
        self.set_values(py, &p, &[value])?;
        if let Err(e) = self.check(py) {
            self.store(py, before);
            return Err(error(format!("{name} = {value:?}: {e}")));
        }
        Ok(())
    }

    /// Add flags (one string or a list of words), as if appended to this
    /// experiment's command line (`"-oversample 2 -phisteps 4"`,
    /// `"-hkl P1.hkl"`); structure factors set from arrays stay set unless
    /// the flags give `-hkl`, and so do the threads, precision, `-scale`
    /// and `-adc` unless the flags set them. The parts stay the same
    /// objects, with the new values.
    fn set_flags(&mut self, flags: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = flags.py();
        let (mut args, arrays) = self.args_and_arrays(py)?;
        args.extend(nanobragg_pipeline::command_line::settings_args(&self.rest));
        args.extend(crate::words(flags)?);
        let e = Experiment::parsed(py, &args, arrays)?;
        crate::warn(py, &e.rest.warnings, &self.rest.warnings)?;
        e.check(py).map_err(error)?;
        *self.beam.borrow_mut(py) = e.beam.borrow(py).clone();
        *self.crystal.borrow_mut(py) = e.crystal.borrow(py).clone();
        *self.detector.borrow_mut(py) = e.detector.borrow(py).clone();
        self.rest = e.rest;
        Ok(())
    }

    /// A copy, parts included (no file is read).
    fn __copy__(&self, py: Python<'_>) -> PyResult<Experiment> {
        self.deep_copy(py)
    }

    /// A copy, as `__copy__`.
    fn __deepcopy__(&self, py: Python<'_>, _memo: &Bound<'_, PyAny>) -> PyResult<Experiment> {
        self.deep_copy(py)
    }

    /// Pickled as the files it was read from (absolute paths), its
    /// settings, the structure factors set from arrays and every attribute's
    /// value (for multiprocessing): unpickling reads the files again and
    /// sets the values.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, ExperimentState)> {
        let inv = self.inv(py);
        let mut args = nanobragg_pipeline::command_line::file_args(&inv);
        // (flag, path) pairs: the paths made absolute, for another directory
        for path in args.iter_mut().skip(1).step_by(2) {
            if let Ok(p) = std::path::absolute(&*path) {
                *path = p.display().to_string();
            }
        }
        args.extend(nanobragg_pipeline::command_line::settings_args(&inv));
        if let Some(seed) = inv.seed {
            args.extend(["-seed".to_string(), seed.to_string()]);
        }
        let c = self.crystal.borrow(py);
        let sf = match (&c.model.sf.source, c.sf_arrays) {
            (_, false) => None,
            (SfSource::Hkl(entries), true) => {
                Some(entries.iter().map(|e| [e.h, e.k, e.l, e.f]).collect())
            }
            (_, true) => {
                return Err(error("this experiment's structure factors cannot be pickled"))
            }
        };
        let mut values = Vec::new();
        let mut all =
            |part: &str, names: Vec<(&'static str, PyResult<Py<PyAny>>)>| -> PyResult<()> {
                for (name, v) in names {
                    values.push((part.to_string(), name.to_string(), v?));
                }
                Ok(())
            };
        let b = self.beam.borrow(py);
        all("beam", BEAM.iter().map(|f| (f.name, (f.get)(&b.cfg, py))).collect())?;
        all("crystal", CRYSTAL.iter().map(|f| (f.name, (f.get)(&c.model, py))).collect())?;
        let d = self.detector.borrow(py);
        all("detector", DETECTOR.iter().map(|f| (f.name, (f.get)(&d.cfg, py))).collect())?;
        all("experiment", EXPERIMENT.iter().map(|f| (f.name, (f.get)(&self.rest, py))).collect())?;
        let restore = py.import("nanobragg._nanobragg")?.getattr("_restore_experiment")?;
        Ok((restore, (args, sf, values)))
    }

    /// The names of the parameters this experiment can be differentiated
    /// by and set through (`experiment[name]`), e.g. "distance", "cell_a".
    #[getter]
    fn parameters(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.check(py).map_err(error)?;
        let inv = self.inv(py);
        let (cfg, seeds) = (&inv.config, inv.seeds());
        let mut names: Vec<String> = nanobragg_core::diff::Param::ALL
            .into_iter()
            .filter(|&p| Parameters::new(cfg.clone(), seeds.setup, vec![p]).is_ok())
            .map(|p| p.name().to_string())
            .collect();
        // a multi-panel detector's panels move each on its own
        for k in 0..cfg.detector.panels.len() {
            names.extend(PANEL_PARAMS.map(|p| format!("{p}@{k}")));
        }
        Ok(names)
    }

    /// The structure-factor grid the experiment renders with: ((h_min,
    /// k_min, l_min), F) with F a float64 array of shape (h, k, l) ranges
    /// (points of the grid no entry gave hold `default_F`, as in
    /// nanoBragg.c). `None` with `default_F` alone.
    #[getter]
    fn structure_factors<'py>(&self, py: Python<'py>) -> PyResult<Option<crate::GridArray<'py>>> {
        let (plan, _) = self.inv(py).plan().map_err(pyerr)?;
        let Some(g) = plan.grid.as_ref() else { return Ok(None) };
        let f = g.unpadded(&g.data);
        let shape = [g.h_range() as usize, g.k_range() as usize, g.l_range() as usize];
        Ok(Some(((g.h_min, g.k_min, g.l_min), numpy::PyArray1::from_vec(py, f).reshape(shape)?)))
    }

    /// Use these structure factors, as an `-hkl` file would give them:
    /// `hkl` an integer array of shape (n, 3), `F` n amplitudes.
    #[pyo3(name = "set_structure_factors")]
    fn set_structure_factors_py(
        &mut self,
        py: Python<'_>,
        hkl: crate::In2<'_, f64>,
        #[allow(non_snake_case)] F: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let entries = crate::hkl_entries(hkl, F)?;
        let before = self.crystal.borrow(py).clone();
        self.crystal.borrow_mut(py).set_arrays(SfSource::Hkl(entries.into()));
        if let Err(e) = self.inv(py).plan() {
            *self.crystal.borrow_mut(py) = before;
            return Err(pyerr(e));
        }
        Ok(())
    }
}

/// A pickled experiment (see `Experiment.__reduce__`).
#[pyfunction]
#[pyo3(signature = (args, sf, values = Vec::new()))]
pub fn _restore_experiment(
    py: Python<'_>,
    args: Vec<String>,
    sf: Option<Vec<[f64; 4]>>,
    values: Vec<(String, String, Py<PyAny>)>,
) -> PyResult<Experiment> {
    let sf = sf.map(|rows| {
        SfSource::Hkl(
            rows.iter()
                .map(|&[h, k, l, f]| nanobragg_core::sf::HklEntry { h, k, l, f })
                .collect::<Vec<_>>()
                .into(),
        )
    });
    let mut e = Experiment::parsed(py, &args, sf)?;
    {
        let (mut b, mut c, mut d) =
            (e.beam.borrow_mut(py), e.crystal.borrow_mut(py), e.detector.borrow_mut(py));
        // the values as they were: the rows with a flag's side effects
        // (a vector selects the custom convention) given again last
        let last = ["convention", "real_space_a"];
        let (plain, again): (Vec<_>, Vec<_>) =
            values.iter().partition(|(_, name, _)| !last.contains(&name.as_str()));
        for (part, name, v) in plain.into_iter().chain(again) {
            let v = v.bind(py);
            match part.as_str() {
                "beam" => (fields::find(BEAM, "Beam", name)?.set)(&mut b.cfg, v)?,
                "crystal" => (fields::find(CRYSTAL, "Crystal", name)?.set)(&mut c.model, v)?,
                "detector" => (fields::find(DETECTOR, "Detector", name)?.set)(&mut d.cfg, v)?,
                _ => (fields::find(EXPERIMENT, "Experiment", name)?.set)(&mut e.rest, v)?,
            }
        }
    }
    Ok(e)
}

/// A pickled panel (see `Panel.__reduce__`).
#[pyfunction]
pub fn _restore_panel(values: &Bound<'_, PyDict>) -> PyResult<Panel> {
    Panel::new(Some(values))
}

/// Registers the experiment's classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Beam>()?;
    m.add_class::<Crystal>()?;
    m.add_class::<Detector>()?;
    m.add_class::<Panel>()?;
    m.add_class::<Experiment>()?;
    m.add_function(wrap_pyfunction!(_restore_experiment, m)?)?;
    m.add_function(wrap_pyfunction!(_restore_panel, m)?)?;
    // the name the experiment had before it was made of objects
    m.add("Model", m.py().get_type::<Experiment>())?;
    Ok(())
}
