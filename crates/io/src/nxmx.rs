//! NXmx (NeXus for macromolecular crystallography) images in HDF5.
//!
//! The layout (all geometry in the NeXus/McStas frame, see [`crate::mx::McStas`]):
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
//!                                pixel_mask (as a frame: 1 padding, 256 -mask/-roi),
//!                                frame_time (a series), data (link to /entry/data/data)
//!       transformations/origin   translation 0 (the chain's root)
//!       module, module_1, …      NXdetector_module: data_origin, data_size,
//!                                module_offset (corner of the first pixel),
//!                                fast/slow_pixel_direction (pixel size along them)
//!   sample                       NXsample: depends_on transformations/phi (phi, phi_end,
//!                                phi_increment_set: one per frame); unit_cell,
//!                                orientation_matrix, ub_matrix (Busing-Levy, at phi 0)
//! ```
//!
//! The file is written by the pure-Rust `rust-hdf5` crate (no C library)
//! into the output's temporary ([`Pending`]), so it is atomic like every
//! other output; a device or pipe gets the bytes of a scratch file. The
//! frames are one chunk each, stored as a [`Compression`] says.

use std::path::Path;

use rust_hdf5::{H5File, H5Group};

use crate::atomic::Pending;
pub use crate::h5::Compression;
use crate::h5::{array, array_nd, axis, axis_attrs, error, group, integer, number, text, H5};
use crate::mx::MxImage;
use crate::IoError;

/// Why `img` cannot be written as NXmx, if it cannot.
fn check(img: &MxImage) -> Result<(), String> {
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
    Ok(())
}

/// Writes `img` as NXmx into `file` (committed by the caller), its frame
/// stored as `compression` says.
pub fn write_nxmx(
    file: &mut Pending,
    img: &MxImage,
    compression: Compression,
) -> Result<(), IoError> {
    let target = file.target().to_path_buf();
    check(img).map_err(|reason| IoError::InvalidInput { path: target.clone(), reason })?;
    if let Some(temp) = file.temp_path() {
        return write_file(temp, img, compression).map_err(error(&target));
    }
    // a device or pipe: HDF5 seeks, so build the file aside and copy it
    let bytes = scratch_bytes(img, compression, &target)?;
    file.write(|w| std::io::Write::write_all(w, &bytes))
}

/// The bytes of an NXmx file holding `img` (else the reason), through a
/// scratch file in the temporary directory.
pub fn nxmx_bytes(img: &MxImage, compression: Compression) -> Result<Vec<u8>, String> {
    check(img)?;
    scratch_bytes(img, compression, Path::new("NXmx")).map_err(|e| match e {
        IoError::InvalidInput { reason, .. } => reason,
        other => other.to_string(),
    })
}

/// The bytes of `img`'s NXmx file, written to a scratch file in the
/// temporary directory (removed after); errors name `target`.
fn scratch_bytes(
    img: &MxImage,
    compression: Compression,
    target: &Path,
) -> Result<Vec<u8>, IoError> {
    let scratch_name = format!("nanobragg-nxmx-{}.h5", std::process::id());
    let scratch = Pending::create(&std::env::temp_dir().join(scratch_name))?;
    let path = scratch.temp_path().expect("a regular file in the temporary directory");
    write_file(path, img, compression).map_err(error(target))?;
    crate::read_all(path)
}

/// Writes the NXmx file of `img` at `path`.
fn write_file(path: &Path, img: &MxImage, compression: Compression) -> H5<()> {
    let file = H5File::create(path)?;
    let root = file.root_group();
    header(&root, img, None)?;
    let beam = group(&root.group("entry/instrument")?, "beam", "NXbeam")?;
    if let [(lambda, _)] = img.spectrum_a.as_slice() {
        number(&beam, "incident_wavelength", *lambda, Some("angstrom"))?;
    } else {
        let (lambdas, weights): (Vec<f64>, Vec<f64>) = img.spectrum_a.iter().copied().unzip();
        array(&beam, "incident_wavelength", &lambdas, Some("angstrom"))?;
        array(&beam, "incident_wavelength_weights", &weights, None)?;
    }
    array_nd(&beam, "incident_polarisation_stokes", &[1, 4], &img.stokes(), None)?;
    number(&beam, "total_flux", img.total_flux, Some("Hz"))?;
    let [n, smax, fmax] = frame_shape(img);
    let data_group = root.group("entry/data")?;
    let shape: &[usize] = if n == 1 { &[1, smax, fmax] } else { &[1, n, smax, fmax] };
    let data = crate::h5::frames_dataset::<i32>(&data_group, "data", shape, compression)?;
    if n == 1 {
        crate::h5::write_frame(&data, 0, img.panels[0].pixels)?;
    } else {
        let parts: Vec<&[i32]> = img.panels.iter().map(|p| p.pixels).collect();
        crate::h5::write_frame(&data, 0, &stack_panels(&panel_sizes(img), &parts))?;
    }
    drop(data);
    link_data(&root)?;
    if let Some(stream) = img.noise_rng {
        let sim = group(&root.group("entry")?, "simulation", "NXcollection")?;
        text(&sim, "noise_rng", stream)?;
    }
    drop((beam, data_group, root));
    file.close()
}

/// The detector path of every NXmx file written here.
const DETECTOR: &str = "/entry/instrument/detector";

/// Everything of an NXmx file but the beam and the data: the entry, source,
/// instrument, detector with its modules and transformations, and sample.
/// `scan`: a rotation series' frames, each's phi at its start (every frame
/// turning by the image's `phi_range_deg`); `None`: the image's one phi.
pub(crate) fn header(root: &H5Group, img: &MxImage, scan: Option<&[f64]>) -> H5<()> {
    let frame = img.frame();
    let det_path = DETECTOR;

    let entry = group(root, "entry", "NXentry")?;
    text(&entry, "definition", "NXmx")?;
    text(&entry, "start_time", &img.start_time)?;
    text(&entry, "end_time_estimated", &img.end_time)?;

    let source = group(&entry, "source", "NXsource")?;
    text(&source, "name", "nanobragg simulation")?;

    let instrument = group(&entry, "instrument", "NXinstrument")?;
    text(&instrument, "name", "nanobragg")?;

    let detector = group(&instrument, "detector", "NXdetector")?;
    let root_axis = format!("{det_path}/transformations/origin");
    text(&detector, "depends_on", &root_axis)?;
    text(&detector, "description", "nanobragg simulated detector")?;
    text(&detector, "type", "pixel")?;
    let p0 = &img.panels[0];
    number(&detector, "distance", img.distance_m, Some("m"))?;
    number(&detector, "beam_center_x", img.beam_centre_px[0], Some("pixel"))?;
    number(&detector, "beam_center_y", img.beam_centre_px[1], Some("pixel"))?;
    number(&detector, "x_pixel_size", p0.pixel_size_m, Some("m"))?;
    number(&detector, "y_pixel_size", p0.pixel_size_m, Some("m"))?;
    number(&detector, "count_time", img.exposure_s, Some("s"))?;
    // (NXmx: invalid above it; the clipped pixels hold the clip value)
    integer(&detector, "saturation_value", img.saturation_value.saturating_sub(1))?;
    integer(&detector, "underload_value", img.underload_value)?;
    integer(&detector, "bit_depth_readout", 32)?;
    integer(&detector, "bit_depth_image", 32)?;
    text(&detector, "sensor_material", &img.sensor_material)?;
    number(&detector, "sensor_thickness", img.sensor_thickness_m, Some("m"))?;

    // (NXmx bit 0: no sensor, the padding of a smaller panel; bit 8: masked
    // by the user, here -mask and the pixels outside the -roi)
    let [n, smax, fmax] = frame_shape(img);
    let mut mask = vec![1u32; n * smax * fmax];
    for (k, p) in img.panels.iter().enumerate() {
        let masked = img.masked.get(k).map_or(&[][..], |m| &m[..]);
        for row in 0..p.spixels {
            let at = (k * smax + row) * fmax;
            for (f, m) in mask[at..at + p.fpixels].iter_mut().enumerate() {
                let left_out = masked.get(row * p.fpixels + f).copied().unwrap_or(false);
                *m = if left_out { 256 } else { 0 };
            }
        }
    }
    let mask_shape: &[usize] = if n == 1 { &[smax, fmax] } else { &[n, smax, fmax] };
    crate::h5::deflated(&detector, "pixel_mask", mask_shape, &mask)?;
    integer(&detector, "pixel_mask_applied", 0)?;

    let transformations = group(&detector, "transformations", "NXtransformations")?;
    axis(&transformations, "origin", 0.0, "m", "translation", [0.0, 0.0, 1.0], ".")?;

    for (i, p) in img.panels.iter().enumerate() {
        let name = if i == 0 { "module".to_string() } else { format!("module_{i}") };
        let module = group(&detector, &name, "NXdetector_module")?;
        let (origin, size): (Vec<i32>, Vec<i32>) = if n == 1 {
            (vec![0, 0], vec![p.spixels as i32, p.fpixels as i32])
        } else {
            (vec![i as i32, 0, 0], vec![1, p.spixels as i32, p.fpixels as i32])
        };
        array(&module, "data_origin", &origin, None)?;
        array(&module, "data_size", &size, None)?;
        let offset = frame.apply(p.origin_m);
        let length = offset.iter().map(|c| c * c).sum::<f64>().sqrt();
        let direction = if length > 0.0 { offset.map(|c| c / length) } else { [0.0, 0.0, 1.0] };
        axis(&module, "module_offset", length, "m", "translation", direction, &root_axis)?;
        let offset_path = format!("{det_path}/{name}/module_offset");
        let px = p.pixel_size_m;
        let (fast, slow) = (frame.apply(p.fast), frame.apply(p.slow));
        axis(&module, "fast_pixel_direction", px, "m", "translation", fast, &offset_path)?;
        axis(&module, "slow_pixel_direction", px, "m", "translation", slow, &offset_path)?;
    }

    let data_group = group(&entry, "data", "NXdata")?;
    data_group.set_attr_string("signal", "data")?;

    let sample = group(&entry, "sample", "NXsample")?;
    text(&sample, "name", "simulated crystal")?;
    text(&sample, "depends_on", "/entry/sample/transformations/phi")?;
    if let Some(o) = img.orientation() {
        array_nd(&sample, "unit_cell", &[1, 6], &o.unit_cell, None)?;
        array(&sample, "unit_cell_abc", &o.unit_cell[..3], Some("angstrom"))?;
        array(&sample, "unit_cell_alphabetagamma", &o.unit_cell[3..], Some("deg"))?;
        array_nd(&sample, "orientation_matrix", &[1, 3, 3], o.u.as_flattened(), None)?;
        array_nd(&sample, "ub_matrix", &[1, 3, 3], o.ub.as_flattened(), Some("1/angstrom"))?;
    }
    let goniometer = group(&sample, "transformations", "NXtransformations")?;
    let spindle = frame.apply(img.spindle);
    let starts = scan.unwrap_or(std::slice::from_ref(&img.phi_start_deg));
    let phi = goniometer.new_dataset::<f64>().shape([starts.len()]).create("phi")?;
    phi.write_raw(starts)?;
    axis_attrs(&phi, "deg", "rotation", spindle, ".")?;
    let ends: Vec<f64> = starts.iter().map(|s| s + img.phi_range_deg).collect();
    array(&goniometer, "phi_end", &ends, Some("deg"))?;
    let widths = vec![img.phi_range_deg; starts.len()];
    array(&goniometer, "phi_increment_set", &widths, Some("deg"))?;
    if scan.is_some() {
        // (a rotation series' frames follow each other: dxtbx takes each
        // image's exposure and epochs from it)
        number(&detector, "frame_time", img.exposure_s, Some("s"))?;
    }
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

/// The detector's link to the data.
pub(crate) fn link_data(root: &H5Group) -> H5<()> {
    root.group(DETECTOR.trim_start_matches('/'))?.link("data", "/entry/data/data")
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
            total_flux: 1e12,
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
            masked: vec![],
            crystal_a: None,
            noise_rng: None,
        }
    }

    /// Opens `bytes` as an HDF5 file (through a scratch file).
    fn open(bytes: &[u8], tag: &str) -> (H5File, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("nb-nxmx-{tag}-{}.h5", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        (H5File::open(&path).unwrap(), path)
    }

    pub(crate) fn read_str(ds: &rust_hdf5::H5Dataset) -> String {
        crate::read_image::text_of(ds).unwrap()
    }

    fn attr_str(ds: &rust_hdf5::H5Dataset, name: &str) -> String {
        ds.attr(name).unwrap().read_string().unwrap()
    }

    fn vector(ds: &rust_hdf5::H5Dataset) -> Vec<f64> {
        ds.attr("vector").unwrap().read_numeric_as::<f64>().unwrap()
    }

    /// The translation a chain of translation axes ends at, followed from
    /// `path` through `depends_on` (a reader's evaluation, written here).
    fn chain_end(f: &H5File, path: &str) -> [f64; 3] {
        let mut at = [0.0; 3];
        let mut path = path.to_string();
        while path != "." {
            let ds = f.dataset(&path).unwrap();
            assert_eq!(attr_str(&ds, "transformation_type"), "translation");
            assert_eq!(attr_str(&ds, "units"), "m");
            let v = vector(&ds);
            let value: f64 = ds.read_raw::<f64>().unwrap()[0];
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
        let mut img = image(panels.clone());
        // panel 0's pixel (2, 1) left out; panel 1 gives no list
        let mut left_out = vec![false; 24];
        left_out[6 + 2] = true;
        img.masked = vec![left_out];
        let bytes = nxmx_bytes(&img, Compression::None).unwrap();
        let (f, path) = open(&bytes, "panels");
        let mask: Vec<u32> =
            f.dataset("entry/instrument/detector/pixel_mask").unwrap().read_raw().unwrap();
        for (i, &m) in mask.iter().enumerate() {
            let (k, s, x) = (i / 24, i / 6 % 4, i % 6);
            let want = match k {
                0 if (s, x) == (1, 2) => 256,
                1 if s >= 3 || x >= 5 => 1,
                _ => 0,
            };
            assert_eq!(m, want, "panel {k} ({x}, {s})");
        }
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
        // MOSFLM beam +x, up +y: NeXus (x, y, z) = (-lab z, lab y, lab x)
        let nexus = |v: [f64; 3]| [-v[2], v[1], v[0]];
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
                let value: f64 = ds.read_raw::<f64>().unwrap()[0];
                assert_eq!(value, p.pixel_size_m);
                let vector = vector(&ds);
                let want = nexus(v);
                for k in 0..3 {
                    assert!((vector[k] - want[k]).abs() < 1e-15);
                }
                assert_eq!(attr_str(&ds, "depends_on"), format!("{base}/module_offset"));
            }
        }
        let beam = "entry/instrument/beam";
        let lambdas: Vec<f64> =
            f.dataset(&format!("{beam}/incident_wavelength")).unwrap().read_raw().unwrap();
        let weights: Vec<f64> =
            f.dataset(&format!("{beam}/incident_wavelength_weights")).unwrap().read_raw().unwrap();
        assert_eq!((lambdas, weights), (vec![0.99, 1.0, 1.01], vec![1.0, 2.0, 1.0]));
        let det = "entry/instrument/detector";
        let sat: i32 =
            f.dataset(&format!("{det}/saturation_value")).unwrap().read_raw().unwrap()[0];
        // (the clipped pixels, i32::MAX, are above it)
        assert_eq!(sat, i32::MAX - 1);
        let stokes: Vec<f64> =
            f.dataset(&format!("{beam}/incident_polarisation_stokes")).unwrap().read_raw().unwrap();
        // the E-vector +z of MOSFLM is McStas -x: Q = +K
        assert_eq!(stokes, [1.0, 0.5, 0.0, 0.0]);
        let flux: f64 = f.dataset(&format!("{beam}/total_flux")).unwrap().read_raw().unwrap()[0];
        assert_eq!(flux, 1e12);
        assert_eq!(read_str(&f.dataset(&format!("{det}/sensor_material")).unwrap()), "Si");
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
        let bytes = nxmx_bytes(&img, Compression::None).unwrap();
        let (f, path) = open(&bytes, "one");
        assert_eq!(f.dataset("entry/data/data").unwrap().shape(), [1, 3, 4]);
        let origin: Vec<i32> =
            f.dataset("entry/instrument/detector/module/data_origin").unwrap().read_raw().unwrap();
        assert_eq!(origin, [0, 0]);
        // no panel masks given: every pixel valid
        let mask = f.dataset("entry/instrument/detector/pixel_mask").unwrap();
        assert_eq!(mask.shape(), [3, 4]);
        assert_eq!(mask.read_raw::<u32>().unwrap(), [0; 12]);
        drop(mask);
        // one wavelength: a scalar, no weights
        let lambda = f.dataset("entry/instrument/beam/incident_wavelength").unwrap();
        assert_eq!(lambda.shape(), Vec::<usize>::new());
        assert_eq!(lambda.read_raw::<f64>().unwrap(), [1.0]);
        assert!(f.dataset("entry/instrument/beam/incident_wavelength_weights").is_err());
        drop((f, lambda));
        std::fs::remove_file(path).ok();
        // a pixel count that does not match is refused
        img.panels[0].spixels = 4;
        assert!(nxmx_bytes(&img, Compression::None)
            .unwrap_err()
            .contains("12 pixels for a 4 x 4 panel"));
    }
}
