//! NXmx (NeXus for macromolecular crystallography) images in HDF5, through
//! the HDF5 C library (the `hdf5` feature; crate `hdf5-metno`).
//!
//! The layout (all geometry in the NeXus/McStas frame, see [`McStas`]):
//!
//! ```text
//! /entry                         NXentry, definition "NXmx", start_time,
//!                                end_time_estimated
//!   data/data                    NXdata: int32 (1, slow, fast); with N > 1 panels
//!                                (1, N, slow, fast), smaller panels zero-padded
//!   source                       NXsource
//!   instrument                   NXinstrument
//!     beam                       NXbeam: incident_wavelength (Å) [+ _weights],
//!                                incident_polarisation_stokes
//!     detector                   NXdetector: depends_on, distance, beam_center_x/y,
//!                                x/y_pixel_size, count_time, saturation_value,
//!                                underload_value, sensor_material, sensor_thickness,
//!                                data (link to /entry/data/data)
//!       transformations/origin   translation 0 (the chain's root)
//!       module, module_1, …      NXdetector_module: data_origin, data_size,
//!                                module_offset (corner of the first pixel),
//!                                fast/slow_pixel_direction (pixel size along them)
//!   sample                       NXsample: depends_on transformations/phi
//! ```
//!
//! The file is built in memory (HDF5's core driver) and written through
//! [`Pending`], so it is atomic like every other output, pipes included.

use std::sync::Mutex;

use hdf5::types::VarLenUnicode;
use hdf5::{Group, Location};

use crate::atomic::Pending;
use crate::mx::{McStas, MxImage};
use crate::IoError;

/// The HDF5 library (Debian's serial build) is not thread-safe and
/// `hdf5-metno` locks only around its own calls: every use of HDF5 in this
/// program goes through this lock (the raw calls in [`file_image`] included).
pub(crate) static HDF5: Mutex<()> = Mutex::new(());

/// The bytes of an NXmx file holding `img` (else the reason).
pub fn nxmx_bytes(img: &MxImage) -> Result<Vec<u8>, String> {
    if img.panels.is_empty() {
        return Err("no detector panel".into());
    }
    for (i, p) in img.panels.iter().enumerate() {
        if p.pixels.len() != p.fpixels * p.spixels {
            return Err(format!(
                "panel {i}: {} pixels for a {} x {} panel",
                p.pixels.len(),
                p.fpixels,
                p.spixels
            ));
        }
    }
    if img.spectrum_a.is_empty() {
        return Err("no wavelength".into());
    }
    let _lock = HDF5.lock().unwrap_or_else(|e| e.into_inner());
    build(img).map_err(|e| format!("HDF5: {e}"))
}

/// Writes `img` as NXmx into `file` (committed by the caller).
pub fn write_nxmx(file: &mut Pending, img: &MxImage) -> Result<(), IoError> {
    let bytes = nxmx_bytes(img)
        .map_err(|reason| IoError::InvalidInput { path: file.target().to_path_buf(), reason })?;
    file.write(|w| std::io::Write::write_all(w, &bytes))
}

fn build(img: &MxImage) -> hdf5::Result<Vec<u8>> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    // never on disk (the core driver without backing store), but HDF5 wants
    // a name no other open file of the process has
    let name = format!(
        "nanobragg-nxmx-{}-{}.h5",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    );
    let file = hdf5::File::with_options().with_fapl(|p| p.core_filebacked(false)).create(&name)?;
    header(&file, img)?;
    let instrument = file.group("entry/instrument")?;
    let beam = group(&instrument, "beam", "NXbeam")?;
    if let [(lambda, _)] = img.spectrum_a.as_slice() {
        number(&beam, "incident_wavelength", *lambda, Some("angstrom"))?;
    } else {
        let (lambdas, weights): (Vec<f64>, Vec<f64>) = img.spectrum_a.iter().copied().unzip();
        array(&beam, "incident_wavelength", &lambdas, Some("angstrom"))?;
        array(&beam, "incident_wavelength_weights", &weights, None)?;
    }
    array(&beam, "incident_polarisation_stokes", &[1.0, img.kahn_factor, 0.0, 0.0], None)?;
    let n = img.panels.len();
    let [_, smax, fmax] = frame_shape(img);
    let data_group = file.group("entry/data")?;
    let data = if n == 1 {
        let ds = frames_dataset::<i32>(&data_group, "data", &[1, smax, fmax], false)?;
        ds.write_raw(img.panels[0].pixels)?;
        ds
    } else {
        let ds = frames_dataset::<i32>(&data_group, "data", &[1, n, smax, fmax], false)?;
        let parts: Vec<&[i32]> = img.panels.iter().map(|p| p.pixels).collect();
        ds.write_raw(&stack_panels(&panel_sizes(img), &parts))?;
        ds
    };
    drop(data);
    link_data(&file)?;

    file.flush()?;
    let bytes = file_image(&file)?;
    drop(file);
    Ok(bytes)
}

/// The detector path of every NXmx file written here.
const DETECTOR: &str = "/entry/instrument/detector";

/// Everything of an NXmx file but the beam and the data: the entry, source,
/// instrument, detector with its modules and transformations, and sample.
pub(crate) fn header(file: &hdf5::File, img: &MxImage) -> hdf5::Result<()> {
    let frame = McStas::new(img.beam, img.polar);
    let det_path = DETECTOR;

    let entry = group(file, "entry", "NXentry")?;
    text(&entry, "definition", "NXmx")?;
    text(&entry, "start_time", &img.start_time)?;
    text(&entry, "end_time_estimated", &img.end_time)?;

    let source = group(&entry, "source", "NXsource")?;
    text(&source, "name", "nanobragg simulation")?;

    let instrument = group(&entry, "instrument", "NXinstrument")?;
    text(&instrument, "name", "nanobragg")?;

    let detector = group(&instrument, "detector", "NXdetector")?;
    let root = format!("{det_path}/transformations/origin");
    text(&detector, "depends_on", &root)?;
    text(&detector, "description", "nanobragg simulated detector")?;
    text(&detector, "type", "pixel")?;
    let p0 = &img.panels[0];
    number(&detector, "distance", img.distance_m, Some("m"))?;
    number(&detector, "beam_center_x", img.beam_centre_px[0], Some("pixel"))?;
    number(&detector, "beam_center_y", img.beam_centre_px[1], Some("pixel"))?;
    number(&detector, "x_pixel_size", p0.pixel_size_m, Some("m"))?;
    number(&detector, "y_pixel_size", p0.pixel_size_m, Some("m"))?;
    number(&detector, "count_time", img.exposure_s, Some("s"))?;
    integer(&detector, "saturation_value", img.saturation_value)?;
    integer(&detector, "underload_value", img.underload_value)?;
    integer(&detector, "bit_depth_readout", 32)?;
    integer(&detector, "bit_depth_image", 32)?;
    text(&detector, "sensor_material", &img.sensor_material)?;
    number(&detector, "sensor_thickness", img.sensor_thickness_m, Some("m"))?;

    let transformations = group(&detector, "transformations", "NXtransformations")?;
    axis(&transformations, "origin", 0.0, "m", "translation", [0.0, 0.0, 1.0], ".")?;

    let n = img.panels.len();
    for (i, p) in img.panels.iter().enumerate() {
        let name = if i == 0 { "module".to_string() } else { format!("module_{i}") };
        let module = group(&detector, &name, "NXdetector_module")?;
        let (origin, size): (Vec<i32>, Vec<i32>) = if n == 1 {
            (vec![0, 0], vec![p.spixels as i32, p.fpixels as i32])
        } else {
            (vec![i as i32, 0, 0], vec![1, p.spixels as i32, p.fpixels as i32])
        };
        int_array(&module, "data_origin", &origin)?;
        int_array(&module, "data_size", &size)?;
        let offset = frame.apply(p.origin_m);
        let length = offset.iter().map(|c| c * c).sum::<f64>().sqrt();
        let direction = if length > 0.0 { offset.map(|c| c / length) } else { [0.0, 0.0, 1.0] };
        axis(&module, "module_offset", length, "m", "translation", direction, &root)?;
        let offset_path = format!("{det_path}/{name}/module_offset");
        let px = p.pixel_size_m;
        let (fast, slow) = (frame.apply(p.fast), frame.apply(p.slow));
        axis(&module, "fast_pixel_direction", px, "m", "translation", fast, &offset_path)?;
        axis(&module, "slow_pixel_direction", px, "m", "translation", slow, &offset_path)?;
    }

    let data_group = group(&entry, "data", "NXdata")?;
    attr_text(&data_group, "signal", "data")?;

    let sample = group(&entry, "sample", "NXsample")?;
    text(&sample, "name", "simulated crystal")?;
    text(&sample, "depends_on", "/entry/sample/transformations/phi")?;
    let goniometer = group(&sample, "transformations", "NXtransformations")?;
    let spindle = frame.apply(img.spindle);
    let phi = goniometer.new_dataset::<f64>().shape(1).create("phi")?;
    phi.write_raw(&[img.phi_start_deg])?;
    axis_attrs(&phi, "deg", "rotation", spindle, ".")?;
    array(&goniometer, "phi_end", &[img.phi_start_deg + img.phi_range_deg], Some("deg"))?;
    array(&goniometer, "phi_increment_set", &[img.phi_range_deg], Some("deg"))?;
    Ok(())
}

/// The shape of one frame of `img`'s data: (panels, slow, fast), the
/// panels' sizes the largest of any (smaller panels are zero-padded).
pub(crate) fn frame_shape(img: &MxImage) -> [usize; 3] {
    let smax = img.panels.iter().map(|p| p.spixels).max().unwrap_or(0);
    let fmax = img.panels.iter().map(|p| p.fpixels).max().unwrap_or(0);
    [img.panels.len(), smax, fmax]
}

/// One frame's values, `parts[k]` those of panel k of `sizes[k]` (fast,
/// slow) pixels, in the (panels, slow, fast) layout of [`frame_shape`],
/// smaller panels zero-padded.
pub(crate) fn stack_panels<T: Copy + Default>(sizes: &[(usize, usize)], parts: &[&[T]]) -> Vec<T> {
    let smax = sizes.iter().map(|p| p.1).max().unwrap_or(0);
    let fmax = sizes.iter().map(|p| p.0).max().unwrap_or(0);
    let mut all = vec![T::default(); sizes.len() * smax * fmax];
    for (i, (&(f, s), v)) in sizes.iter().zip(parts).enumerate() {
        for row in 0..s {
            let at = (i * smax + row) * fmax;
            all[at..at + f].copy_from_slice(&v[row * f..(row + 1) * f]);
        }
    }
    all
}

/// The (fast, slow) pixels of each panel of `img`.
pub(crate) fn panel_sizes(img: &MxImage) -> Vec<(usize, usize)> {
    img.panels.iter().map(|p| (p.fpixels, p.spixels)).collect()
}

/// Dataset `name` of `group` of the given shape, frames along its first
/// axis; `chunked`: one frame a chunk (frames written one at a time into a
/// file on disk).
pub(crate) fn frames_dataset<T: hdf5::H5Type>(
    group: &Group,
    name: &str,
    shape: &[usize],
    chunked: bool,
) -> hdf5::Result<hdf5::Dataset> {
    let builder = group.new_dataset::<T>().shape(shape);
    let builder = match chunked {
        true => {
            let mut chunk = shape.to_vec();
            chunk[0] = 1;
            builder.chunk(chunk)
        }
        false => builder,
    };
    builder.create(name)
}

/// The detector's link to the data.
pub(crate) fn link_data(file: &hdf5::File) -> hdf5::Result<()> {
    file.group(DETECTOR)?.link_hard("/entry/data/data", "data")
}

/// The bytes of the open in-memory `file`.
fn file_image(file: &hdf5::File) -> hdf5::Result<Vec<u8>> {
    use hdf5_sys::h5f::H5Fget_file_image;
    let id = file.id();
    // SAFETY: `id` is a valid open file for the life of `file`; a null buffer
    // asks for the size only; the second call writes at most `len` bytes
    // into a buffer of that length. HDF5 is not used by another thread
    // meanwhile (the caller holds HDF5).
    let len = unsafe { H5Fget_file_image(id, std::ptr::null_mut(), 0) };
    if len < 0 {
        return Err("H5Fget_file_image failed".into());
    }
    let mut buf = vec![0u8; len as usize];
    // SAFETY: as above
    let got = unsafe { H5Fget_file_image(id, buf.as_mut_ptr().cast(), buf.len()) };
    if got != len {
        return Err("H5Fget_file_image failed".into());
    }
    Ok(buf)
}

fn vlen(s: &str) -> hdf5::Result<VarLenUnicode> {
    s.parse::<VarLenUnicode>().map_err(|e| hdf5::Error::from(e.to_string()))
}

pub(crate) fn attr_text(loc: &Location, name: &str, value: &str) -> hdf5::Result<()> {
    loc.new_attr::<VarLenUnicode>().shape(()).create(name)?.write_scalar(&vlen(value)?)
}

/// A child group with its `NX_class`.
pub(crate) fn group(parent: &Group, name: &str, class: &str) -> hdf5::Result<Group> {
    let g = parent.create_group(name)?;
    attr_text(&g, "NX_class", class)?;
    Ok(g)
}

pub(crate) fn text(g: &Group, name: &str, value: &str) -> hdf5::Result<()> {
    g.new_dataset::<VarLenUnicode>().shape(()).create(name)?.write_scalar(&vlen(value)?)
}

pub(crate) fn number(g: &Group, name: &str, value: f64, units: Option<&str>) -> hdf5::Result<()> {
    let ds = g.new_dataset::<f64>().shape(()).create(name)?;
    ds.write_scalar(&value)?;
    if let Some(u) = units {
        attr_text(&ds, "units", u)?;
    }
    Ok(())
}

pub(crate) fn integer(g: &Group, name: &str, value: i32) -> hdf5::Result<()> {
    g.new_dataset::<i32>().shape(()).create(name)?.write_scalar(&value)
}

pub(crate) fn array(
    g: &Group,
    name: &str,
    values: &[f64],
    units: Option<&str>,
) -> hdf5::Result<()> {
    let ds = g.new_dataset::<f64>().shape(values.len()).create(name)?;
    ds.write_raw(values)?;
    if let Some(u) = units {
        attr_text(&ds, "units", u)?;
    }
    Ok(())
}

pub(crate) fn int_array(g: &Group, name: &str, values: &[i32]) -> hdf5::Result<()> {
    g.new_dataset::<i32>().shape(values.len()).create(name)?.write_raw(values)
}

/// An NXtransformations axis: a scalar `value` along `vector`, after the
/// axis `depends_on` (`.`: none).
fn axis(
    g: &Group,
    name: &str,
    value: f64,
    units: &str,
    kind: &str,
    vector: [f64; 3],
    depends_on: &str,
) -> hdf5::Result<()> {
    let ds = g.new_dataset::<f64>().shape(()).create(name)?;
    ds.write_scalar(&value)?;
    axis_attrs(&ds, units, kind, vector, depends_on)
}

fn axis_attrs(
    ds: &hdf5::Dataset,
    units: &str,
    kind: &str,
    vector: [f64; 3],
    depends_on: &str,
) -> hdf5::Result<()> {
    attr_text(ds, "units", units)?;
    attr_text(ds, "transformation_type", kind)?;
    ds.new_attr::<f64>().shape(3).create("vector")?.write_raw(&vector)?;
    ds.new_attr::<f64>().shape(3).create("offset")?.write_raw(&[0.0; 3])?;
    attr_text(ds, "offset_units", units_of_offset(units))?;
    attr_text(ds, "depends_on", depends_on)
}

/// Offsets are lengths even on a rotation axis.
fn units_of_offset(units: &str) -> &str {
    if units == "deg" {
        "m"
    } else {
        units
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::mx::Panel;

    /// An image of `panels` with the experiment's values set.
    pub(crate) fn image<'a>(panels: Vec<Panel<'a>>) -> MxImage<'a> {
        MxImage {
            panels,
            beam: [1.0, 0.0, 0.0],
            polar: [0.0, 0.0, 1.0],
            spindle: [0.0, 0.0, 1.0],
            wavelength_a: 1.0,
            spectrum_a: vec![(0.99, 1.0), (1.0, 2.0), (1.01, 1.0)],
            kahn_factor: 0.5,
            distance_m: 0.1,
            beam_centre_px: [10.5, 12.5],
            exposure_s: 1.0,
            phi_start_deg: 5.0,
            phi_range_deg: 0.1,
            saturation_value: i32::MAX,
            underload_value: -1,
            sensor_material: "Si".into(),
            sensor_thickness_m: 0.0,
            start_time: "2026-11-25T12:00:00Z".into(),
            end_time: "2026-11-25T12:00:01Z".into(),
        }
    }

    /// Opens `bytes` as an HDF5 file (through a scratch file).
    fn open(bytes: &[u8], tag: &str) -> (hdf5::File, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("nb-nxmx-{tag}-{}.h5", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        (hdf5::File::open(&path).unwrap(), path)
    }

    fn read_str(ds: &hdf5::Dataset) -> String {
        ds.read_scalar::<VarLenUnicode>().unwrap().as_str().to_string()
    }

    fn attr_str(ds: &hdf5::Dataset, name: &str) -> String {
        ds.attr(name).unwrap().read_scalar::<VarLenUnicode>().unwrap().as_str().to_string()
    }

    /// The translation a chain of translation axes ends at, followed from
    /// `path` through `depends_on` (a reader's evaluation, written here).
    fn chain_end(f: &hdf5::File, path: &str) -> [f64; 3] {
        let mut at = [0.0; 3];
        let mut path = path.to_string();
        while path != "." {
            let ds = f.dataset(&path).unwrap();
            assert_eq!(attr_str(&ds, "transformation_type"), "translation");
            assert_eq!(attr_str(&ds, "units"), "m");
            let v: Vec<f64> = ds.attr("vector").unwrap().read_raw().unwrap();
            let value: f64 = ds.read_scalar().unwrap();
            for i in 0..3 {
                at[i] += value * v[i];
            }
            path = attr_str(&ds, "depends_on");
        }
        at
    }

    #[test]
    fn panels_data_and_geometry() {
        let a: Vec<i32> = (0..6 * 4).map(|i| i * 1000 - 7).collect();
        let b: Vec<i32> = (0..3 * 5).map(|i| -i).collect();
        let c = 0.3f64.cos();
        let s = 0.3f64.sin();
        let panels = vec![
            Panel {
                origin_m: [0.1, 0.02, -0.03],
                fast: [0.0, c, s],
                slow: [0.0, -s, c],
                pixel_size_m: 1e-4,
                fpixels: 6,
                spixels: 4,
                pixels: &a,
            },
            Panel {
                origin_m: [0.12, -0.02, 0.01],
                fast: [0.0, 0.0, 1.0],
                slow: [0.0, -1.0, 0.0],
                pixel_size_m: 2e-4,
                fpixels: 5,
                spixels: 3,
                pixels: &b,
            },
        ];
        let img = image(panels.clone());
        let bytes = nxmx_bytes(&img).unwrap();
        // the reads below are HDF5 calls too: not beside another test's write
        let _hdf5 = HDF5.lock().unwrap_or_else(|e| e.into_inner());
        let (f, path) = open(&bytes, "panels");
        assert_eq!(read_str(&f.dataset("entry/definition").unwrap()), "NXmx");
        let data = f.dataset("entry/data/data").unwrap();
        assert_eq!(data.shape(), [1, 2, 4, 6]);
        let all: Vec<i32> = data.read_raw().unwrap();
        // panel 1 (3 x 5) in the corner of its (4 x 6) slot, zeros around
        for s in 0..4 {
            for x in 0..6 {
                assert_eq!(all[s * 6 + x], a[s * 6 + x]);
                let want = if s < 3 && x < 5 { b[s * 5 + x] } else { 0 };
                assert_eq!(all[24 + s * 6 + x], want);
            }
        }
        // the detector's link to the same data
        let linked: Vec<i32> =
            f.dataset("entry/instrument/detector/data").unwrap().read_raw().unwrap();
        assert_eq!(linked, all);
        // MOSFLM beam +x, E-vector +z: NeXus (x, y, z) = (lab z, -lab y, lab x)
        let nexus = |v: [f64; 3]| [v[2], -v[1], v[0]];
        for (i, p) in panels.iter().enumerate() {
            let m = if i == 0 { "module".to_string() } else { format!("module_{i}") };
            let base = format!("/entry/instrument/detector/{m}");
            let origin: Vec<i32> =
                f.dataset(&format!("{base}/data_origin")).unwrap().read_raw().unwrap();
            let size: Vec<i32> =
                f.dataset(&format!("{base}/data_size")).unwrap().read_raw().unwrap();
            assert_eq!(origin, [i as i32, 0, 0]);
            assert_eq!(size, [1, p.spixels as i32, p.fpixels as i32]);
            let corner = chain_end(&f, &format!("{base}/module_offset"));
            let want = nexus(p.origin_m);
            for k in 0..3 {
                assert!((corner[k] - want[k]).abs() < 1e-15, "{corner:?} {want:?}");
            }
            for (axis, v) in [("fast", p.fast), ("slow", p.slow)] {
                let ds = f.dataset(&format!("{base}/{axis}_pixel_direction")).unwrap();
                let value: f64 = ds.read_scalar().unwrap();
                assert_eq!(value, p.pixel_size_m);
                let vector: Vec<f64> = ds.attr("vector").unwrap().read_raw().unwrap();
                let want = nexus(v);
                for k in 0..3 {
                    assert!((vector[k] - want[k]).abs() < 1e-15);
                }
                assert_eq!(attr_str(&ds, "depends_on"), format!("{base}/module_offset"));
            }
        }
        let beam = f.group("entry/instrument/beam").unwrap();
        let lambdas: Vec<f64> = beam.dataset("incident_wavelength").unwrap().read_raw().unwrap();
        let weights: Vec<f64> =
            beam.dataset("incident_wavelength_weights").unwrap().read_raw().unwrap();
        assert_eq!((lambdas, weights), (vec![0.99, 1.0, 1.01], vec![1.0, 2.0, 1.0]));
        let det = f.group("entry/instrument/detector").unwrap();
        let sat: i32 = det.dataset("saturation_value").unwrap().read_scalar().unwrap();
        assert_eq!(sat, i32::MAX);
        assert_eq!(read_str(&det.dataset("sensor_material").unwrap()), "Si");
        drop((f, data));
        std::fs::remove_file(path).ok();
    }

    #[test]
    fn one_panel_is_a_3d_frame() {
        let a = vec![3i32; 12];
        let mut img = image(vec![Panel {
            origin_m: [0.1, 0.0, 0.0],
            fast: [0.0, 0.0, 1.0],
            slow: [0.0, -1.0, 0.0],
            pixel_size_m: 1e-4,
            fpixels: 4,
            spixels: 3,
            pixels: &a,
        }]);
        img.spectrum_a = vec![(1.0, 1.0)];
        let bytes = nxmx_bytes(&img).unwrap();
        let hdf5 = HDF5.lock().unwrap_or_else(|e| e.into_inner());
        let (f, path) = open(&bytes, "one");
        assert_eq!(f.dataset("entry/data/data").unwrap().shape(), [1, 3, 4]);
        let origin: Vec<i32> =
            f.dataset("entry/instrument/detector/module/data_origin").unwrap().read_raw().unwrap();
        assert_eq!(origin, [0, 0]);
        // one wavelength: a scalar, no weights
        let beam = f.group("entry/instrument/beam").unwrap();
        assert_eq!(beam.dataset("incident_wavelength").unwrap().read_scalar::<f64>().unwrap(), 1.0);
        assert!(beam.dataset("incident_wavelength_weights").is_err());
        drop((f, hdf5));
        std::fs::remove_file(path).ok();
        // a pixel count that does not match is refused
        img.panels[0].spixels = 4;
        assert!(nxmx_bytes(&img).unwrap_err().contains("12 pixels for a 4 x 4 panel"));
    }
}
