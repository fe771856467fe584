//! DIALS experiment lists (`.expt`, JSON): the beam, the detector down to
//! its panels, the crystal and the goniometer and scan of one experiment.
//!
//! Vectors are in the DIALS laboratory frame, lengths in mm and Å, angles
//! in degrees. A detector with a `hierarchy` gives each panel's frame
//! relative to its group's, as dxtbx writes it; the groups' frames are
//! composed here down to laboratory-frame panels.

use crate::{read_all, IoError};
use serde_json::Value;
use std::path::Path;

/// One experiment of a list.
#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    /// Wavelength (Å).
    pub wavelength_a: f64,
    /// Unit vector from the sample towards the source (dxtbx's beam
    /// direction: the X-rays travel along its opposite).
    pub direction: [f64; 3],
    /// Normal of the polarization plane (the plane of the E-vector and the
    /// beam).
    pub polarization_normal: [f64; 3],
    /// Fraction of the intensity polarized in that plane.
    pub polarization_fraction: f64,
    /// The panels, in the laboratory frame, in the file's order.
    pub panels: Vec<Panel>,
    /// The crystal's real-space vectors a, b, c (Å), where the experiment
    /// has a crystal.
    pub real_space: Option<[[f64; 3]; 3]>,
    /// The goniometer's rotation axis, where it has one.
    pub rotation_axis: Option<[f64; 3]>,
    /// The scan, where the experiment has one.
    pub scan: Option<Scan>,
}

/// A DIALS scan: images `first_image` to `first_image + images - 1`, each
/// turning the crystal by `width_deg` from where the one before ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Scan {
    /// The number of the scan's first image (`image_range[0]`).
    pub first_image: usize,
    /// How many images.
    pub images: usize,
    /// The rotation angle at the start of the first image (deg).
    pub start_deg: f64,
    /// The rotation of each image (deg).
    pub width_deg: f64,
    /// Each image's exposure time (s), where the scan gives one.
    pub exposure_s: Option<f64>,
}

/// One panel in the laboratory frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// Its name.
    pub name: String,
    /// Sample to the outer corner of the first pixel (mm).
    pub origin_mm: [f64; 3],
    /// Direction of increasing fast index.
    pub fast: [f64; 3],
    /// Direction of increasing slow index.
    pub slow: [f64; 3],
    /// Pixel size along fast and slow (mm).
    pub pixel_mm: [f64; 2],
    /// Pixels along fast and slow.
    pub image_size: [usize; 2],
    /// Sensor thickness (mm).
    pub thickness_mm: f64,
    /// Sensor attenuation coefficient (1/mm).
    pub mu_per_mm: f64,
    /// Where the panel's pixels lie in the file's data array (fast, slow
    /// index of its first pixel): a CrystFEL geometry's `min_fs`, `min_ss`.
    /// `None` (DIALS): the panels' images are stacked along slow.
    pub data_origin: Option<[usize; 2]>,
}

/// Reads the one experiment of a DIALS experiment list.
pub fn read_expt(path: &Path) -> Result<Experiment, IoError> {
    let bytes = read_all(path)?;
    parse_expt(&bytes).map_err(|reason| IoError::Malformed { path: path.to_path_buf(), reason })
}

/// Reads every experiment of a DIALS experiment list, in order.
pub fn read_expt_list(path: &Path) -> Result<Vec<Experiment>, IoError> {
    let bytes = read_all(path)?;
    parse_expt_list(&bytes)
        .map_err(|reason| IoError::Malformed { path: path.to_path_buf(), reason })
}

/// Parses the text of an experiment list of one experiment; the error says
/// what is wrong.
pub fn parse_expt(bytes: &[u8]) -> Result<Experiment, String> {
    let mut list = parse_expt_list(bytes)?;
    match list.len() {
        1 => Ok(list.remove(0)),
        n => Err(format!(
            "{n} experiments: give a list of one (dials.split_experiments writes them apart)"
        )),
    }
}

/// Parses the text of an experiment list (the output of
/// dials.stills_process holds one experiment per indexed lattice); the
/// error says what is wrong, and in which experiment where there are
/// several.
pub fn parse_expt_list(bytes: &[u8]) -> Result<Vec<Experiment>, String> {
    let root: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not a JSON experiment list: {e}"))?;
    let experiments = root.get("experiment").and_then(Value::as_array).ok_or(
        "no \"experiment\" list (a DIALS experiment list has \"__id__\": \"ExperimentList\")",
    )?;
    if experiments.is_empty() {
        return Err("the experiment list is empty".into());
    }
    let many = experiments.len() > 1;
    experiments
        .iter()
        .enumerate()
        .map(|(k, expt)| {
            experiment(&root, expt)
                .map_err(|e| if many { format!("experiment {k}: {e}") } else { e })
        })
        .collect()
}

/// One experiment of the list `root`.
fn experiment(root: &Value, expt: &Value) -> Result<Experiment, String> {
    // the experiment names its models by index into the lists beside it
    let model = |kind: &str| -> Result<Option<&Value>, String> {
        let Some(index) = expt.get(kind).filter(|v| !v.is_null()) else { return Ok(None) };
        let i = index.as_u64().ok_or(format!("experiment: \"{kind}\" is not an index"))?;
        let list = root.get(kind).and_then(Value::as_array);
        list.and_then(|l| l.get(i as usize))
            .map(Some)
            .ok_or(format!("experiment: {kind} {i} is not in the \"{kind}\" list"))
    };
    let beam = model("beam")?.ok_or("the experiment has no beam")?;
    let detector = model("detector")?.ok_or("the experiment has no detector")?;
    let wavelength_a = number(beam, "wavelength", "beam")?;
    if wavelength_a <= 0.0 {
        return Err(format!("beam: wavelength {wavelength_a} Å is not positive"));
    }
    let direction = unit(vector(beam, "direction", "beam")?, "beam direction")?;
    let polarization_normal = match beam.get("polarization_normal") {
        Some(_) => unit(vector(beam, "polarization_normal", "beam")?, "polarization normal")?,
        None => [0.0, 1.0, 0.0],
    };
    // (dxtbx's default: a synchrotron's horizontal polarization)
    let polarization_fraction = match beam.get("polarization_fraction") {
        Some(_) => number(beam, "polarization_fraction", "beam")?,
        None => 0.999,
    };
    if !(0.0..=1.0).contains(&polarization_fraction) {
        return Err(format!(
            "beam: polarization_fraction {polarization_fraction} is not in [0, 1]"
        ));
    }
    let panels = panels(detector)?;
    let real_space = match model("crystal")? {
        Some(c) => Some([
            vector(c, "real_space_a", "crystal")?,
            vector(c, "real_space_b", "crystal")?,
            vector(c, "real_space_c", "crystal")?,
        ]),
        None => None,
    };
    if let Some([a, b, c]) = real_space {
        // the cell's volume a · (b × c), against the edges' lengths
        let cross =
            [b[1] * c[2] - b[2] * c[1], b[2] * c[0] - b[0] * c[2], b[0] * c[1] - b[1] * c[0]];
        let volume = a[0] * cross[0] + a[1] * cross[1] + a[2] * cross[2];
        let length = |v: [f64; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        let tiny = 1e-9 * length(a) * length(b) * length(c);
        // (a NaN volume is refused too)
        if volume.abs() <= tiny || volume.is_nan() {
            return Err(format!(
                "crystal: real_space_a, real_space_b and real_space_c are coplanar (cell volume {volume:e} Å³)"
            ));
        }
    }
    let rotation_axis = match model("goniometer")? {
        Some(g) => {
            // r = S R(φ) F A h: only S = F = 1 is read
            const IDENTITY: [f64; 9] = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
            for key in ["fixed_rotation", "setting_rotation"] {
                if g.get(key).is_some() && numbers::<9>(g, key, "goniometer")? != IDENTITY {
                    return Err(format!(
                        "goniometer: a {key} other than the identity is not read (a multi-axis goniometer)"
                    ));
                }
            }
            Some(unit(vector(g, "rotation_axis", "goniometer")?, "rotation axis")?)
        }
        None => None,
    };
    let scan = model("scan")?.map(scan).transpose()?;
    Ok(Experiment {
        wavelength_a,
        direction,
        polarization_normal,
        polarization_fraction,
        panels,
        real_space,
        rotation_axis,
        scan,
    })
}

/// A scan in either form dxtbx writes: the legacy one (`oscillation` =
/// [start, width] of the first image, `exposure_time` one value or one per
/// image) or the current `properties` table (per-image `oscillation`
/// starts, `oscillation_width` for a one-image scan, per-image
/// `exposure_time`).
fn scan(s: &Value) -> Result<Scan, String> {
    let [first, last] = numbers::<2>(s, "image_range", "scan")?;
    if first.fract() != 0.0 || last.fract() != 0.0 || first < 0.0 || last < first {
        return Err(format!(
            "scan: image_range [{first}, {last}] is not two image numbers, first <= last"
        ));
    }
    let images = (last - first) as usize + 1;
    let list = |v: &Value, key: &str| -> Result<Option<Vec<f64>>, String> {
        let Some(x) = v.get(key).filter(|x| !x.is_null()) else { return Ok(None) };
        let items = x.as_array().ok_or(format!("scan: \"{key}\" is not a list"))?;
        let values: Option<Vec<f64>> = items.iter().map(Value::as_f64).collect();
        match values {
            Some(v) if !v.is_empty() && v.iter().all(|x| x.is_finite()) => Ok(Some(v)),
            _ => Err(format!("scan: \"{key}\" is not a list of numbers")),
        }
    };
    let (props, legacy) = match s.get("properties") {
        Some(p) => (p, false),
        None => (s, true),
    };
    let osc = list(props, "oscillation")?.ok_or("scan: no \"oscillation\"")?;
    let (start_deg, width_deg) = if legacy {
        match osc.as_slice() {
            [start, width] => (*start, *width),
            _ => return Err("scan: \"oscillation\" is not [start, width]".into()),
        }
    } else {
        if osc.len() != images {
            return Err(format!(
                "scan: {} \"oscillation\" values for the {images} images of image_range",
                osc.len()
            ));
        }
        let width = match (images, list(props, "oscillation_width")?) {
            (_, Some(w)) => w[0],
            (1, None) => return Err("scan: a one-image scan needs \"oscillation_width\"".into()),
            (_, None) => osc[1] - osc[0],
        };
        // (dxtbx refuses a scan whose images turn by different angles)
        for (k, pair) in osc.windows(2).enumerate() {
            let step = pair[1] - pair[0];
            if (step - width).abs() > 1e-6 * width.abs().max(1e-3) {
                return Err(format!(
                    "scan: image {} starts {step} deg after the one before, not the scan's width {width} deg",
                    first as usize + k + 1
                ));
            }
        }
        (osc[0], width)
    };
    if width_deg < 0.0 {
        return Err(format!("scan: the oscillation width {width_deg} deg is negative (the rotation is taken as right-handed about the axis: give the axis reversed)"));
    }
    let exposure_s = match list(props, "exposure_time")? {
        None => None,
        Some(t) => {
            if t.len() != 1 && t.len() != images {
                return Err(format!("scan: {} exposure times for the {images} images", t.len()));
            }
            if let Some(other) = t.iter().find(|&&x| x != t[0]) {
                return Err(format!(
                    "scan: the exposure times differ ({} and {other} s); every image is rendered with one",
                    t[0]
                ));
            }
            if t[0] < 0.0 {
                return Err(format!("scan: exposure time {} s is negative", t[0]));
            }
            Some(t[0])
        }
    };
    Ok(Scan { first_image: first as usize, images, start_deg, width_deg, exposure_s })
}

/// A frame: origin, fast and slow axes.
#[derive(Clone, Copy)]
struct Frame {
    origin: [f64; 3],
    fast: [f64; 3],
    slow: [f64; 3],
}

impl Frame {
    const LAB: Frame = Frame { origin: [0.0; 3], fast: [1.0, 0.0, 0.0], slow: [0.0, 1.0, 0.0] };

    fn read(v: &Value, what: &str) -> Result<Frame, String> {
        Ok(Frame {
            origin: vector(v, "origin", what)?,
            fast: unit(vector(v, "fast_axis", what)?, &format!("{what} fast axis"))?,
            slow: unit(vector(v, "slow_axis", what)?, &format!("{what} slow axis"))?,
        })
    }

    /// `local`, given in this frame's axes (fast, slow, normal), in the
    /// frame this one is given in.
    fn compose(&self, local: &Frame) -> Frame {
        let n = cross(self.fast, self.slow);
        let to = |x: [f64; 3]| -> [f64; 3] {
            std::array::from_fn(|i| self.fast[i] * x[0] + self.slow[i] * x[1] + n[i] * x[2])
        };
        let o = to(local.origin);
        Frame {
            origin: std::array::from_fn(|i| self.origin[i] + o[i]),
            fast: to(local.fast),
            slow: to(local.slow),
        }
    }
}

/// The detector's panels in the laboratory frame.
fn panels(detector: &Value) -> Result<Vec<Panel>, String> {
    let list =
        detector.get("panels").and_then(Value::as_array).ok_or("detector: no \"panels\" list")?;
    if list.is_empty() {
        return Err("detector: the panel list is empty".into());
    }
    // each panel's frame: as written, or placed by the hierarchy's groups
    let mut frames: Vec<Option<Frame>> = vec![None; list.len()];
    match detector.get("hierarchy").filter(|h| !h.is_null()) {
        Some(root) => place(root, &Frame::LAB, list, &mut frames, 0)?,
        None => {
            for (k, p) in list.iter().enumerate() {
                frames[k] = Some(Frame::read(p, &format!("panel {k}"))?);
            }
        }
    }
    let mut panels = Vec::with_capacity(list.len());
    for (k, (p, frame)) in list.iter().zip(frames).enumerate() {
        let what = format!("panel {k}");
        let frame = frame.ok_or(format!("{what} is in no group of the detector's hierarchy"))?;
        let size = pair(p, "image_size", &what)?;
        let pixel_mm = pair(p, "pixel_size", &what)?;
        if size.iter().any(|&n| n < 1.0 || n.is_nan()) {
            return Err(format!(
                "{what}: image_size {size:?}: a panel has at least one pixel along each axis"
            ));
        }
        if size.iter().any(|&n| !(n.fract() == 0.0 && n < 1e6)) {
            return Err(format!(
                "{what}: image_size {size:?} is not two whole numbers of pixels below 10⁶"
            ));
        }
        if pixel_mm.iter().any(|&x| !(x > 0.0 && x.is_finite())) {
            return Err(format!("{what}: pixel_size {pixel_mm:?} is not positive"));
        }
        let optional = |key: &str| p.get(key).and_then(Value::as_f64).unwrap_or(0.0);
        panels.push(Panel {
            name: p.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
            origin_mm: frame.origin,
            fast: frame.fast,
            slow: frame.slow,
            pixel_mm,
            image_size: size.map(|n| n as usize),
            thickness_mm: optional("thickness"),
            mu_per_mm: optional("mu"),
            data_origin: None,
        });
    }
    Ok(panels)
}

/// Places the panels below hierarchy node `node`, whose parent is `parent`.
fn place(
    node: &Value,
    parent: &Frame,
    list: &[Value],
    frames: &mut [Option<Frame>],
    depth: usize,
) -> Result<(), String> {
    if depth > 64 {
        return Err("detector: the hierarchy is nested more than 64 deep".into());
    }
    if let Some(k) = node.get("panel") {
        let k = k.as_u64().map(|k| k as usize).filter(|&k| k < list.len());
        let k = k.ok_or("detector: a hierarchy node names a panel not in the list")?;
        if frames[k].is_some() {
            return Err(format!("detector: panel {k} is in the hierarchy twice"));
        }
        frames[k] = Some(parent.compose(&Frame::read(&list[k], &format!("panel {k}"))?));
        return Ok(());
    }
    let frame = parent.compose(&Frame::read(node, "hierarchy group")?);
    for child in node.get("children").and_then(Value::as_array).into_iter().flatten() {
        place(child, &frame, list, frames, depth + 1)?;
    }
    Ok(())
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
}

fn number(v: &Value, key: &str, what: &str) -> Result<f64, String> {
    let x = v.get(key).and_then(Value::as_f64);
    x.filter(|x| x.is_finite()).ok_or(format!("{what}: \"{key}\" is missing or not a number"))
}

fn numbers<const N: usize>(v: &Value, key: &str, what: &str) -> Result<[f64; N], String> {
    let bad = || format!("{what}: \"{key}\" is missing or not {N} numbers");
    let a = v.get(key).and_then(Value::as_array).filter(|a| a.len() == N).ok_or_else(bad)?;
    let mut out = [0.0; N];
    for (o, x) in out.iter_mut().zip(a) {
        *o = x.as_f64().filter(|x| x.is_finite()).ok_or_else(bad)?;
    }
    Ok(out)
}

fn vector(v: &Value, key: &str, what: &str) -> Result<[f64; 3], String> {
    numbers::<3>(v, key, what)
}

fn pair(v: &Value, key: &str, what: &str) -> Result<[f64; 2], String> {
    numbers::<2>(v, key, what)
}

/// `x` normalised; an error for a zero vector.
fn unit(x: [f64; 3], what: &str) -> Result<[f64; 3], String> {
    let m = (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]).sqrt();
    if m == 0.0 || !m.is_finite() {
        return Err(format!("the {what} has zero length"));
    }
    Ok(x.map(|c| c / m))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_PANELS: &str = r#"{
      "__id__": "ExperimentList",
      "experiment": [{"__id__": "Experiment", "beam": 0, "detector": 0, "crystal": 0}],
      "beam": [{"direction": [0.0, 0.0, 1.0], "wavelength": 1.2,
                "polarization_normal": [0.0, 1.0, 0.0], "polarization_fraction": 0.999}],
      "detector": [{
        "panels": [
          {"name": "m0", "origin": [0.0, 0.0, 0.0], "fast_axis": [1.0, 0.0, 0.0],
           "slow_axis": [0.0, -1.0, 0.0], "pixel_size": [0.075, 0.075], "image_size": [1024, 512],
           "thickness": 0.32, "mu": 3.9},
          {"name": "m1", "origin": [0.0, -40.0, 0.0], "fast_axis": [1.0, 0.0, 0.0],
           "slow_axis": [0.0, -1.0, 0.0], "pixel_size": [0.075, 0.075], "image_size": [1024, 512]}
        ],
        "hierarchy": {"origin": [-38.4, 40.0, -120.0], "fast_axis": [0.0, 1.0, 0.0],
                      "slow_axis": [-1.0, 0.0, 0.0],
                      "children": [{"panel": 0}, {"panel": 1}]}
      }],
      "crystal": [{"real_space_a": [78.0, 0.0, 0.0], "real_space_b": [0.0, 79.0, 0.0],
                   "real_space_c": [0.0, 0.0, 38.0]}]
    }"#;

    #[test]
    fn hierarchy_places_panels_in_the_lab_frame() {
        let e = parse_expt(TWO_PANELS.as_bytes()).unwrap();
        assert_eq!(e.wavelength_a, 1.2);
        assert_eq!(e.panels.len(), 2);
        // the group turns local x into lab y and local y into lab -x (normal z stays)
        let p1 = &e.panels[1];
        assert_eq!(p1.fast, [0.0, 1.0, 0.0]);
        assert_eq!(p1.slow, [1.0, 0.0, 0.0]);
        assert_eq!(p1.origin_mm, [-38.4 + 40.0, 40.0, -120.0]);
        assert_eq!(e.panels[0].thickness_mm, 0.32);
        assert_eq!(e.panels[1].mu_per_mm, 0.0);
        assert_eq!(e.real_space.unwrap()[1], [0.0, 79.0, 0.0]);
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let e = parse_expt(b"{").unwrap_err();
        assert!(e.contains("not a JSON"), "{e}");
        let no_panels = TWO_PANELS.replace("\"panels\"", "\"planes\"");
        assert!(parse_expt(no_panels.as_bytes()).unwrap_err().contains("\"panels\""));
        let orphan = TWO_PANELS.replace(", {\"panel\": 1}", "");
        assert!(parse_expt(orphan.as_bytes()).unwrap_err().contains("panel 1 is in no group"));
        let bad = TWO_PANELS.replace("[1024, 512]}", "[1024.5, 512]}");
        assert!(parse_expt(bad.as_bytes()).unwrap_err().contains("image_size"));
        for size in ["[0, 512]", "[-5, 512]"] {
            let bad = TWO_PANELS.replace("[1024, 512]}", &format!("{size}}}"));
            let e = parse_expt(bad.as_bytes()).unwrap_err();
            assert!(e.contains("at least one pixel along each axis"), "{e}");
        }
        let flat = TWO_PANELS
            .replace("\"real_space_c\": [0.0, 0.0, 38.0]", "\"real_space_c\": [78.0, 79.0, 0.0]");
        let e = parse_expt(flat.as_bytes()).unwrap_err();
        assert!(e.contains("crystal") && e.contains("coplanar"), "{e}");
    }

    /// TWO_PANELS with a scan (the experiment's `"scan": 0`).
    fn with_scan(scan: &str) -> Result<Option<Scan>, String> {
        let text = TWO_PANELS
            .replace("\"crystal\": 0}", "\"crystal\": 0, \"scan\": 0}")
            .replace("\"crystal\": [", &format!("\"scan\": [{scan}],\n\"crystal\": ["));
        parse_expt(text.as_bytes()).map(|e| e.scan)
    }

    #[test]
    fn reads_legacy_and_properties_scans() {
        let legacy = with_scan(
            r#"{"image_range": [1, 10], "oscillation": [30.0, 0.5], "exposure_time": [0.1]}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            legacy,
            Scan {
                first_image: 1,
                images: 10,
                start_deg: 30.0,
                width_deg: 0.5,
                exposure_s: Some(0.1)
            }
        );
        let one = with_scan(
            r#"{"image_range": [5, 5], "properties": {"oscillation": [12.0],
                "oscillation_width": [0.25], "exposure_time": [0.02], "epochs": [0.0]}}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            one,
            Scan {
                first_image: 5,
                images: 1,
                start_deg: 12.0,
                width_deg: 0.25,
                exposure_s: Some(0.02)
            }
        );
        let two = with_scan(
            r#"{"image_range": [1, 2], "properties": {"oscillation": [0.0, 0.1],
                "exposure_time": [0.5, 0.5]}}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!((two.images, two.start_deg, two.width_deg), (2, 0.0, 0.1));
        let starts: Vec<String> = (0..10).map(|k| format!("{}", -5.0 + 0.2 * k as f64)).collect();
        let ten = with_scan(&format!(
            r#"{{"image_range": [1, 10], "properties": {{"oscillation": [{}]}}}}"#,
            starts.join(", ")
        ))
        .unwrap()
        .unwrap();
        assert_eq!((ten.images, ten.start_deg, ten.exposure_s), (10, -5.0, None));
        assert!((ten.width_deg - 0.2).abs() < 1e-12, "{}", ten.width_deg);
    }

    #[test]
    fn scan_errors_say_what_is_wrong() {
        let cases = [
            (r#"{"image_range": [1, 3], "oscillation": [0.0]}"#, "not [start, width]"),
            (r#"{"image_range": [3, 1], "oscillation": [0.0, 1.0]}"#, "first <= last"),
            (
                r#"{"image_range": [1, 3], "properties": {"oscillation": [0.0, 1.0]}}"#,
                "2 \"oscillation\" values for the 3 images",
            ),
            (
                r#"{"image_range": [1, 1], "properties": {"oscillation": [0.0]}}"#,
                "needs \"oscillation_width\"",
            ),
            (
                r#"{"image_range": [1, 3], "properties": {"oscillation": [0.0, 1.0, 3.0]}}"#,
                "image 3 starts 2 deg after",
            ),
            (r#"{"image_range": [1, 2], "oscillation": [0.0, -1.0]}"#, "negative"),
            (
                r#"{"image_range": [1, 2], "oscillation": [0.0, 1.0], "exposure_time": [0.1, 0.2]}"#,
                "exposure times differ",
            ),
            (
                r#"{"image_range": [1, 3], "oscillation": [0.0, 1.0], "exposure_time": [0.1, 0.1]}"#,
                "2 exposure times for the 3 images",
            ),
        ];
        for (scan, expected) in cases {
            let e = with_scan(scan).unwrap_err();
            assert!(e.contains(expected), "{scan}: {e}");
        }
    }
}
