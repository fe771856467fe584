//! `-expt FILE`: a DIALS experiment list sets the beam, the detector (one
//! panel as the custom-vector flags would, or several panels), the crystal's
//! orientation and the rotation; `-geom FILE`, a CrystFEL geometry file, the
//! detector and the beam's direction (and wavelength where it gives the
//! photon energy). Both act in the order of the command line: flags after
//! them override what they set; detector placement flags after them are
//! refused (see `parse::check_order`).

use crate::cli_error::CliError;
use nanobragg_core::config::{Convention, PanelConfig, SimConfig};
use nanobragg_io::crystfel::Geometry;
use nanobragg_io::expt::{Experiment, Panel};

/// Detector flags that place the panel or lay out its pixels: after an
/// `-expt` they would contradict the file's panels.
pub(crate) const PLACEMENT: &[&str] = &[
    "-distance",
    "-close_distance",
    "-pixel",
    "-detpixels",
    "-detpixels_f",
    "-detpixels_s",
    "-detsize",
    "-detsize_f",
    "-detsize_s",
    "-Xbeam",
    "-Ybeam",
    "-Xclose",
    "-Yclose",
    "-ORGX",
    "-ORGY",
    "-pivot",
    "-mosflm",
    "-denzo",
    "-adxv",
    "-xds",
    "-dials",
    "-fdet_vector",
    "-sdet_vector",
    "-odet_vector",
    "-pix0_vector",
];

/// A detector file read before the flags are applied.
#[derive(Debug, Clone, PartialEq)]
pub enum DetectorFile {
    /// `-expt`: its experiments (one, or the shots of a list such as
    /// dials.stills_process writes).
    Expt(std::sync::Arc<Vec<Experiment>>),
    /// `-geom`.
    Geom(Geometry),
}

/// Reads the file of an `-expt` or `-geom` and checks what the simulator
/// needs of it (square pixels).
pub fn read(flag: &str, path: &std::path::Path) -> Result<DetectorFile, CliError> {
    let table = |error| CliError::Table { flag: flag.into(), error };
    let file = match flag {
        "-geom" => DetectorFile::Geom(nanobragg_io::crystfel::read_geom(path).map_err(table)?),
        _ => {
            let list = nanobragg_io::expt::read_expt_list(path).map_err(table)?;
            if list.len() > 1 {
                if let Some((k, scan)) = list
                    .iter()
                    .enumerate()
                    .find_map(|(k, e)| e.scan.as_ref().filter(|s| s.images > 1).map(|s| (k, s)))
                {
                    return Err(CliError::Unused {
                        what: format!(
                            "{flag} {}: experiment {k} of {} is a rotation scan of {} images; a list of experiments is rendered one still shot each (give the scan's experiment alone)",
                            path.display(),
                            list.len(),
                            scan.images
                        ),
                    });
                }
            }
            DetectorFile::Expt(std::sync::Arc::new(list))
        }
    };
    // (the panels of every experiment: a shot's are checked as the first's)
    let all_panels: Vec<&Panel> = match &file {
        DetectorFile::Expt(list) => list.iter().flat_map(|e| &e.panels).collect(),
        DetectorFile::Geom(g) => g.panels.iter().collect(),
    };
    let panels = &all_panels;
    let sensor = |p: &Panel| (p.thickness_mm, p.mu_per_mm);
    if let Some(p) = panels.iter().find(|p| sensor(p) != sensor(panels[0])) {
        return Err(CliError::Unused {
            what: format!(
                "{flag} {}: panel {} has another sensor (thickness, mu) than panel {}; one sensor for every panel is simulated",
                path.display(),
                p.name,
                panels[0].name
            ),
        });
    }
    for (k, p) in panels.iter().enumerate() {
        if p.pixel_mm[0] != p.pixel_mm[1] {
            return Err(CliError::Unused {
                what: format!(
                    "{flag} {}: panel {k} has pixels of {} x {} mm; only square pixels are simulated",
                    path.display(),
                    p.pixel_mm[0],
                    p.pixel_mm[1]
                ),
            });
        }
    }
    Ok(file)
}

/// Sets what a detector file describes: for an experiment list, what its
/// experiment `shot` (from 0) describes.
pub fn apply_file(config: &mut SimConfig, file: &DetectorFile, shot: usize) {
    match file {
        DetectorFile::Expt(list) => apply(config, &list[shot.min(list.len() - 1)]),
        DetectorFile::Geom(g) => apply_geom(config, g),
    }
}

/// Sets what a CrystFEL geometry describes: the panels (in the DIALS frame,
/// see `nanobragg_io::crystfel`), the beam along −z polarized (where
/// `-polar` says so) along x, and the wavelength of its photon energy.
pub fn apply_geom(config: &mut SimConfig, g: &Geometry) {
    if let Some(ev) = g.photon_energy_ev {
        // as -energy converts
        config.beam.lambda_a = 12398.42 / ev;
    }
    let d = &mut config.detector;
    d.convention = Convention::Custom;
    d.beam = [0.0, 0.0, -1.0];
    d.polar = [1.0, 0.0, 0.0];
    // (a rotation, -phi/-osc, turns about the horizontal axis)
    d.spindle = [1.0, 0.0, 0.0];
    d.twotheta_axis = [1.0, 0.0, 0.0];
    set_panels(config, &g.panels);
}

/// Sets what the experiment describes.
pub fn apply(config: &mut SimConfig, e: &Experiment) {
    let beam = e.direction.map(|x| -x);
    config.beam.lambda_a = e.wavelength_a;
    // the E-vector lies in the polarization plane, across the beam
    let n = e.polarization_normal;
    let ev = nanobragg_core::vec3::cross(n, beam);
    let d = &mut config.detector;
    d.convention = Convention::Custom;
    d.beam = beam;
    if ev != [0.0; 3] {
        d.polar = ev;
    }
    // Kahn's factor: the intensity fraction p along the E-vector gives 2p - 1
    config.beam.kahn_factor = 2.0 * e.polarization_fraction - 1.0;
    // (without a goniometer a rotation, -phi/-osc, turns about the
    // horizontal axis, DIALS's usual rotation axis)
    d.spindle = e.rotation_axis.unwrap_or([1.0, 0.0, 0.0]);
    d.twotheta_axis = [1.0, 0.0, 0.0];
    if let Some(p) = e.panels.first() {
        // a thickness without an attenuation (no mu, or 0) is a sensor DIALS
        // models without parallax: a thin one here (nanoBragg's capture
        // fraction with no absorption is 0, an empty image)
        let absorbs = p.mu_per_mm > 0.0;
        d.thick_um = if absorbs { p.thickness_mm * 1000.0 } else { 0.0 };
        d.attenuation_um = Some(absorbs.then(|| 1000.0 / p.mu_per_mm));
    }
    if let Some(scan) = &e.scan {
        config.crystal.phi0_deg = scan.start_deg;
        config.crystal.osc_deg = scan.width_deg;
        if let Some(t) = scan.exposure_s {
            config.beam.exposure_s = t;
        }
    }
    set_panels(config, &e.panels);
    if let Some(real) = e.real_space {
        config.crystal.real_space_a = Some(real);
        config.crystal.mat = None;
        // (the file's cell replaces a -cell before it; one after it rescales)
        config.crystal.cell = None;
    }
}

/// The detector of `panels`: one panel as its custom-vector single panel,
/// several as a panel list.
fn set_panels(config: &mut SimConfig, panels: &[Panel]) {
    let d = &mut config.detector;
    let panels: Vec<PanelConfig> = panels
        .iter()
        .enumerate()
        .map(|(k, p)| PanelConfig {
            name: if p.name.is_empty() { format!("panel {k}") } else { p.name.clone() },
            origin_mm: p.origin_mm,
            fast: p.fast,
            slow: p.slow,
            pixel_mm: p.pixel_mm[0],
            fpixels: p.image_size[0],
            spixels: p.image_size[1],
            data_origin: p.data_origin,
        })
        .collect();
    match panels.as_slice() {
        [one] => match one.detector(d) {
            Ok(single) => *d = single,
            // (the same panel again as a list: the setup says what is wrong)
            Err(_) => d.panels = panels,
        },
        _ => d.panels = panels,
    }
}
