//! Detector images read back, whatever wrote them: SMV, miniCBF (the Pilatus
//! header and byte_offset pixels) and NXmx (a frame of `/entry/data/data`,
//! or of the `data_NNNNNN` datasets vendors split a series into; chunks
//! plain, gzip-deflated or bitshuffle-LZ4). What `refine -observed` and
//! Python's `read_image` take.

use std::path::Path;

use rust_hdf5::{H5Dataset, H5File};

use crate::cbf::BINARY_START;
use crate::h5::error;
use crate::IoError;

/// The file formats [`read_image`] tells apart by their first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    /// ADSC SMV: a `{ ... }` text header, then 16- or 32-bit pixels.
    Smv,
    /// miniCBF: a CIF text header and one byte_offset binary section.
    Cbf,
    /// NXmx in HDF5.
    Nxmx,
}

impl ImageFormat {
    /// The format's usual name.
    pub fn name(self) -> &'static str {
        match self {
            ImageFormat::Smv => "SMV",
            ImageFormat::Cbf => "miniCBF",
            ImageFormat::Nxmx => "NXmx",
        }
    }

    /// The format of a file starting with `head`, if it is one of these.
    pub fn sniff(head: &[u8]) -> Option<ImageFormat> {
        if head.starts_with(b"\x89HDF\r\n\x1a\n") {
            Some(ImageFormat::Nxmx)
        } else if head.starts_with(b"###CBF") {
            Some(ImageFormat::Cbf)
        } else if head.starts_with(b"{\nHEADER_BYTES") || head.starts_with(b"{\r\nHEADER_BYTES") {
            Some(ImageFormat::Smv)
        } else {
            None
        }
    }
}

/// One frame of a detector image file: its pixels and the values its header
/// gives.
#[derive(Debug, Clone)]
pub struct ImageFile {
    /// What the file is.
    pub format: ImageFormat,
    /// Pixels along the fast axis (of each panel).
    pub fpixels: usize,
    /// Pixels along the slow axis (of each panel).
    pub spixels: usize,
    /// Panels in a frame (1 but for a multi-panel NXmx file).
    pub panels: usize,
    /// Frames the file holds.
    pub frames: usize,
    /// The frame read: `panels` blocks of `spixels` rows of `fpixels`
    /// values, fast index fastest, as stored (counts, ADU offset included).
    pub pixels: Vec<f64>,
    /// Value at and above which a pixel is saturated, where the header says.
    pub saturation: Option<f64>,
    /// Value at and below which a pixel is not to be trusted (Pilatus gaps
    /// are -1, bad pixels -2), where the header says.
    pub underload: Option<f64>,
    /// The header's values, by the names the format gives them.
    pub header: Vec<(String, String)>,
}

/// The geometry an image's header gives, where it gives it: miniCBF's
/// `Detector_distance`, `Beam_xy`, `Wavelength` and `Pixel_size`, NXmx's
/// `distance`, `beam_center_x`/`_y`, `incident_wavelength` and
/// `x_pixel_size`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HeaderGeometry {
    /// Sample to where the beam meets the detector (m).
    pub distance_m: Option<f64>,
    /// Where the beam meets the detector, pixels from the outer corner of
    /// the first pixel (fast, slow).
    pub beam_centre_px: Option<[f64; 2]>,
    /// The wavelength (Å): one, not a spectrum.
    pub wavelength_a: Option<f64>,
    /// The pixel size (m) along fast.
    pub pixel_size_m: Option<f64>,
}

impl ImageFile {
    /// What the header says of the geometry (nothing for SMV and raw
    /// images, whose headers are read elsewhere).
    pub fn geometry(&self) -> HeaderGeometry {
        let value = |key: &str| self.header.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        // the numbers of a header value: "(150.25, 146.5) pixels" holds two
        let numbers = |key: &str| -> Vec<f64> {
            value(key)
                .unwrap_or("")
                .split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',')
                .filter_map(|w| w.parse().ok())
                .collect()
        };
        let first = |key: &str| numbers(key).first().copied();
        match self.format {
            ImageFormat::Cbf => HeaderGeometry {
                distance_m: first("Detector_distance"),
                beam_centre_px: match numbers("Beam_xy")[..] {
                    [f, s, ..] => Some([f, s]),
                    _ => None,
                },
                wavelength_a: first("Wavelength"),
                pixel_size_m: first("Pixel_size"),
            },
            ImageFormat::Nxmx => HeaderGeometry {
                distance_m: first("distance"),
                beam_centre_px: first("beam_center_x")
                    .zip(first("beam_center_y"))
                    .map(|(f, s)| [f, s]),
                wavelength_a: first("incident_wavelength"),
                pixel_size_m: first("x_pixel_size"),
            },
            _ => HeaderGeometry::default(),
        }
    }
}

/// Reads frame `frame` (0 for the first) of the image file at `path`.
pub fn read_image(path: &Path, frame: usize) -> Result<ImageFile, IoError> {
    crate::regular_file(path)?;
    let mut head = [0u8; 16];
    let n = {
        use std::io::Read;
        let mut f = std::fs::File::open(path)
            .map_err(|source| IoError::Read { path: path.to_path_buf(), source })?;
        f.read(&mut head).map_err(|source| IoError::Read { path: path.to_path_buf(), source })?
    };
    match ImageFormat::sniff(&head[..n]) {
        Some(ImageFormat::Nxmx) => read_nxmx(path, frame),
        Some(ImageFormat::Cbf) => {
            only_frame(path, frame)?;
            parse_cbf(&crate::read_all(path)?, path)
        }
        Some(ImageFormat::Smv) => {
            only_frame(path, frame)?;
            let img = crate::smv::read_smv(path)?;
            let header = img
                .header
                .lines()
                .filter_map(|l| l.trim().trim_end_matches(';').split_once('='))
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .collect();
            let saturation = img.value_of("SATURATED_VALUE").or(Some(u16::MAX as f64));
            Ok(ImageFile {
                format: ImageFormat::Smv,
                fpixels: img.width,
                spixels: img.height,
                panels: 1,
                frames: 1,
                pixels: img.data.iter().map(|&v| f64::from(v)).collect(),
                saturation,
                underload: None,
                header,
            })
        }
        None => Err(bad(path, "neither SMV, miniCBF nor NXmx (HDF5)".into())),
    }
}

fn bad(path: &Path, reason: String) -> IoError {
    IoError::Malformed { path: path.to_path_buf(), reason }
}

/// Refuses a frame past the first of a one-image format.
fn only_frame(path: &Path, frame: usize) -> Result<(), IoError> {
    match frame {
        0 => Ok(()),
        k => {
            Err(bad(path, format!("frame {k} asked of a file of one image (frames count from 0)")))
        }
    }
}

/// A miniCBF file's header values and its one image.
pub fn parse_cbf(bytes: &[u8], path: &Path) -> Result<ImageFile, IoError> {
    let start = bytes
        .windows(4)
        .position(|w| w == BINARY_START)
        .ok_or_else(|| bad(path, "no binary section (the bytes 0c 1a 04 d5)".into()))?;
    let text = String::from_utf8_lossy(&bytes[..start]);
    let mime = |key: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim().eq_ignore_ascii_case(key)).then(|| v.trim().trim_matches('"').to_string())
        })
    };
    let size = |key: &str| -> Result<usize, IoError> {
        let v = mime(key).ok_or_else(|| bad(path, format!("no {key} in the binary section")))?;
        v.parse().map_err(|_| bad(path, format!("{key} {v:?} is not a whole number")))
    };
    let fpixels = size("X-Binary-Size-Fastest-Dimension")?;
    let spixels = size("X-Binary-Size-Second-Dimension")?;
    let len = size("X-Binary-Size")?;
    if !text.contains("x-CBF_BYTE_OFFSET") {
        return Err(bad(path, "the pixels are not byte_offset compressed".into()));
    }
    if let Some(order) = mime("X-Binary-Element-Byte-Order") {
        if !order.eq_ignore_ascii_case("LITTLE_ENDIAN") {
            return Err(bad(path, format!("byte order {order} (only LITTLE_ENDIAN is read)")));
        }
    }
    let n =
        fpixels.checked_mul(spixels).ok_or_else(|| bad(path, "the image size overflows".into()))?;
    let data = bytes.get(start + 4..start + 4 + len).ok_or_else(|| {
        bad(path, format!("the binary section announces {len} bytes; the file ends first"))
    })?;
    let pixels = byte_offset_decode(data, n)
        .map_err(|why| bad(path, format!("the byte_offset pixels: {why}")))?;
    // the Pilatus header: "# Key value ..." lines
    let header: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# "))
        .filter_map(|l| {
            let l = l.trim_end();
            let (k, v) = l.split_once(' ')?;
            Some((k.trim_end_matches(':').to_string(), v.trim().to_string()))
        })
        .collect();
    let first_number = |key: &str| {
        header.iter().find(|(k, _)| k == key).and_then(|(_, v)| {
            v.split(|c: char| c.is_whitespace() || c == '(' || c == ',')
                .find(|w| !w.is_empty())?
                .parse::<f64>()
                .ok()
        })
    };
    let saturation = first_number("Count_cutoff");
    Ok(ImageFile {
        format: ImageFormat::Cbf,
        fpixels,
        spixels,
        panels: 1,
        frames: 1,
        pixels,
        saturation,
        // Pilatus marks gaps -1 and bad pixels -2
        underload: Some(-1.0),
        header,
    })
}

/// Undoes [`crate::cbf::byte_offset`]: `n` values from `data`.
pub fn byte_offset_decode(data: &[u8], n: usize) -> Result<Vec<f64>, String> {
    let mut out = Vec::with_capacity(n);
    let (mut at, mut prev) = (0usize, 0i64);
    let take = |at: &mut usize, k: usize| -> Result<&[u8], String> {
        let s = data.get(*at..*at + k).ok_or("the data ends early")?;
        *at += k;
        Ok(s)
    };
    while out.len() < n {
        let b = take(&mut at, 1)?[0] as i8;
        let delta = if b != i8::MIN {
            i64::from(b)
        } else {
            let s = take(&mut at, 2)?;
            let d16 = i16::from_le_bytes([s[0], s[1]]);
            if d16 != i16::MIN {
                i64::from(d16)
            } else {
                let s = take(&mut at, 4)?;
                let d32 = i32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                if d32 != i32::MIN {
                    i64::from(d32)
                } else {
                    let s = take(&mut at, 8)?;
                    i64::from_le_bytes(s.try_into().expect("8 bytes"))
                }
            }
        };
        prev = prev.wrapping_add(delta);
        out.push(prev as f64);
    }
    Ok(out)
}

/// The text of a scalar string dataset, fixed-length or variable-length.
pub(crate) fn text_of(ds: &H5Dataset) -> rust_hdf5::Result<String> {
    let strings = ds.read_strings()?;
    Ok(strings.into_iter().next().unwrap_or_default().trim_end_matches('\0').to_string())
}

/// The frame datasets of an NXmx file: `/entry/data/data`, else the
/// `data_NNNNNN` datasets of `/entry/data` in order (each possibly an
/// external link to another file).
fn frame_datasets(file: &H5File) -> rust_hdf5::Result<Vec<H5Dataset>> {
    if let Ok(ds) = file.dataset("entry/data/data") {
        return Ok(vec![ds]);
    }
    let group = file.root_group().group("entry/data")?;
    let mut names: Vec<String> =
        group.link_names()?.into_iter().filter(|n| n.starts_with("data_")).collect();
    names.sort();
    names.iter().map(|n| file.dataset(&format!("entry/data/{n}"))).collect()
}

/// The values of the block `starts`..`starts + counts` of `ds`, any integer
/// or floating-point type, as `f64` (exact for every pixel value a detector
/// gives, up to 2^53).
fn numbers(ds: &H5Dataset, starts: &[usize], counts: &[usize]) -> rust_hdf5::Result<Vec<f64>> {
    use rust_hdf5::DatatypeMessage as T;
    fn read<V: rust_hdf5::H5Type + Into<f64>>(
        ds: &H5Dataset,
        starts: &[usize],
        counts: &[usize],
    ) -> rust_hdf5::Result<Vec<f64>> {
        // a scalar has no block to select
        let values = match starts.is_empty() {
            true => ds.read_raw::<V>()?,
            false => ds.read_slice::<V>(starts, counts)?,
        };
        Ok(values.into_iter().map(Into::into).collect())
    }
    match ds.datatype()? {
        T::FixedPoint { size: 1, signed: true, .. } => read::<i8>(ds, starts, counts),
        T::FixedPoint { size: 1, signed: false, .. } => read::<u8>(ds, starts, counts),
        T::FixedPoint { size: 2, signed: true, .. } => read::<i16>(ds, starts, counts),
        T::FixedPoint { size: 2, signed: false, .. } => read::<u16>(ds, starts, counts),
        T::FixedPoint { size: 4, signed: true, .. } => read::<i32>(ds, starts, counts),
        T::FixedPoint { size: 4, signed: false, .. } => read::<u32>(ds, starts, counts),
        T::FixedPoint { size: 8, signed: true, .. } if !starts.is_empty() => {
            Ok(ds.read_slice::<i64>(starts, counts)?.into_iter().map(|v| v as f64).collect())
        }
        T::FixedPoint { size: 8, signed: true, .. } => {
            Ok(ds.read_raw::<i64>()?.into_iter().map(|v| v as f64).collect())
        }
        T::FixedPoint { size: 8, signed: false, .. } if !starts.is_empty() => {
            Ok(ds.read_slice::<u64>(starts, counts)?.into_iter().map(|v| v as f64).collect())
        }
        T::FixedPoint { size: 8, signed: false, .. } => {
            Ok(ds.read_raw::<u64>()?.into_iter().map(|v| v as f64).collect())
        }
        T::FloatingPoint { size: 4, .. } => read::<f32>(ds, starts, counts),
        T::FloatingPoint { size: 8, .. } => read::<f64>(ds, starts, counts),
        other => Err(rust_hdf5::Hdf5Error::Unsupported(format!("pixels of type {other:?}"))),
    }
}

/// Frame `frame` of an NXmx file.
fn read_nxmx(path: &Path, frame: usize) -> Result<ImageFile, IoError> {
    let err = error(path);
    let file = H5File::open(path).map_err(&err)?;
    let parts = frame_datasets(&file).map_err(&err)?;
    if parts.is_empty() {
        return Err(bad(path, "no /entry/data/data (nor data_000001, ...)".into()));
    }
    let mut shape = parts[0].shape();
    if !(2..=4).contains(&shape.len()) {
        return Err(bad(path, format!("/entry/data/data has {} dimensions", shape.len())));
    }
    if shape.len() == 2 {
        shape.insert(0, 1);
    }
    let frame_dims = shape[1..].to_vec();
    let (panels, spixels, fpixels) = match frame_dims.as_slice() {
        [s, f] => (1, *s, *f),
        [p, s, f] => (*p, *s, *f),
        _ => unreachable!("2 to 4 dimensions"),
    };
    // the frames of every part, in order
    let mut frames = 0;
    let mut found = None;
    for ds in &parts {
        let mut dims = ds.shape();
        if dims.len() == frame_dims.len() {
            dims.insert(0, 1);
        }
        if dims[1..] != frame_dims[..] {
            return Err(bad(path, "the data_NNNNNN datasets differ in frame size".into()));
        }
        if found.is_none() && frame < frames + dims[0] {
            found = Some((ds, frame - frames));
        }
        frames += dims[0];
    }
    let Some((ds, k)) = found else {
        let plural = if frames == 1 { "" } else { "s" };
        return Err(bad(
            path,
            format!(
                "frame {frame} asked of a file of {frames} frame{plural} (frames count from 0)"
            ),
        ));
    };
    let rank = ds.shape().len();
    let (starts, counts): (Vec<usize>, Vec<usize>) = if rank == frame_dims.len() {
        (vec![0; rank], frame_dims.clone())
    } else {
        let mut starts = vec![0; rank];
        starts[0] = k;
        (starts, std::iter::once(1).chain(frame_dims.iter().copied()).collect())
    };
    let pixels = numbers(ds, &starts, &counts).map_err(&err)?;
    let number = |p: &str| {
        let ds = file.dataset(p).ok()?;
        let rank = ds.shape().len();
        let all = numbers(&ds, &vec![0; rank], &ds.shape()).ok()?;
        match all.as_slice() {
            [one] => Some(*one),
            // one value per frame (a spectrum's wavelengths are not)
            many if many.len() == frames => many.get(frame).copied(),
            _ => None,
        }
    };
    // lengths in m and wavelengths in Å, whatever unit the file gives
    // (a unit not known here: the value is not given)
    let in_unit = |p: &str, value: f64| -> Option<f64> {
        let geometry = ["distance", "x_pixel_size", "y_pixel_size", "incident_wavelength"];
        if !geometry.iter().any(|g| p.ends_with(g)) {
            return Some(value);
        }
        let ds = file.dataset(p).ok()?;
        let Ok(attr) = ds.attr("units") else { return Some(value) };
        let unit = attr.read_string().ok()?;
        let scale = match (p.ends_with("wavelength"), unit.trim()) {
            (true, "angstrom" | "Angstrom" | "Å" | "A") => 1.0,
            (true, "nm") => 10.0,
            (true, "m") => 1e10,
            (false, "m") => 1.0,
            (false, "mm") => 1e-3,
            (false, "um" | "µm" | "micron" | "microns") => 1e-6,
            (false, "cm") => 1e-2,
            _ => return None,
        };
        Some(value * scale)
    };
    let det = "entry/instrument/detector";
    let mut header = Vec::new();
    for (name, p) in [
        ("incident_wavelength", "entry/instrument/beam/incident_wavelength".to_string()),
        ("distance", format!("{det}/distance")),
        ("beam_center_x", format!("{det}/beam_center_x")),
        ("beam_center_y", format!("{det}/beam_center_y")),
        ("x_pixel_size", format!("{det}/x_pixel_size")),
        ("y_pixel_size", format!("{det}/y_pixel_size")),
        ("count_time", format!("{det}/count_time")),
        ("saturation_value", format!("{det}/saturation_value")),
        ("underload_value", format!("{det}/underload_value")),
    ] {
        if let Some(v) = number(&p).and_then(|v| in_unit(&p, v)) {
            header.push((name.to_string(), v.to_string()));
        }
    }
    let value = |key: &str| header.iter().find(|(k, _)| k == key).and_then(|(_, v)| v.parse().ok());
    Ok(ImageFile {
        format: ImageFormat::Nxmx,
        fpixels,
        spixels,
        panels,
        frames,
        pixels,
        // (NXmx's data is invalid above saturation_value; integer counts)
        saturation: value("saturation_value").map(|s| s + 1.0),
        underload: value("underload_value"),
        header,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mx::Panel;
    use crate::nxmx::tests::image;
    use crate::nxmx::{nxmx_bytes, Compression};
    use crate::nxmx_series::{SeriesFile, ShotRecord};

    fn scratch(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("nb-read-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn panel(pixels: &[i32], f: usize, s: usize) -> Panel<'_> {
        Panel {
            origin_m: [0.1, 0.0, 0.0],
            fast: [0.0, 0.0, 1.0],
            slow: [0.0, -1.0, 0.0],
            pixel_size_m: 1e-4,
            fpixels: f,
            spixels: s,
            pixels,
        }
    }

    #[test]
    fn nxmx_frames_read_back_under_every_compression() {
        let dir = scratch("nxmx");
        // large values and jumps, so that no filter could pass by chance
        let a: Vec<i32> = (0..40 * 30).map(|i| (i * 7919) % 100_003 - 50).collect();
        for c in [Compression::None, Compression::Deflate { level: 6 }, Compression::BitshuffleLz4]
        {
            let img = image(vec![panel(&a, 40, 30)]);
            let path = dir.join("one.nxs");
            std::fs::write(&path, nxmx_bytes(&img, c).unwrap()).unwrap();
            let got = read_image(&path, 0).unwrap();
            assert_eq!(
                (got.format, got.fpixels, got.spixels, got.frames),
                (ImageFormat::Nxmx, 40, 30, 1)
            );
            assert!(got.pixels.iter().zip(&a).all(|(g, w)| *g == f64::from(*w)), "{c:?}");
            assert_eq!(got.saturation, Some(f64::from(i32::MAX)));
            let value = |k: &str| got.header.iter().find(|(n, _)| n == k).unwrap().1.clone();
            assert_eq!(value("distance"), "0.1");
            assert_eq!(value("x_pixel_size"), "0.0001");
            // the geometry refine compares (three wavelengths: no one wavelength)
            let want = HeaderGeometry {
                distance_m: Some(0.1),
                beam_centre_px: Some([10.5, 12.5]),
                wavelength_a: None,
                pixel_size_m: Some(1e-4),
            };
            assert_eq!(got.geometry(), want);
            let err = read_image(&path, 1).unwrap_err().to_string();
            assert!(err.contains("frame 1 asked of a file of 1 frame"), "{err}");
        }
        // frame k of a series, deflated
        let target = dir.join("series.nxs");
        let img = image(vec![panel(&[], 4, 3)]);
        let mut file = SeriesFile::create(
            &target,
            &img,
            3,
            false,
            ("", ""),
            Compression::Deflate { level: 1 },
            None,
        )
        .unwrap();
        let frames: Vec<Vec<i32>> =
            (0..3).map(|k| (0..12).map(|i| i * 1000 + k).collect()).collect();
        for (k, f) in frames.iter().enumerate() {
            let record =
                ShotRecord { shot: k as u64, spectrum_a: vec![(1.0, 1.0)], ..Default::default() };
            file.write_frame(&[f], None, record).unwrap();
        }
        file.commit().unwrap();
        let got = read_image(&target, 2).unwrap();
        assert_eq!(got.frames, 3);
        assert_eq!(got.pixels, frames[2].iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn cbf_reads_back_what_it_wrote() {
        let dir = scratch("cbf");
        // every byte_offset escape: 8, 16, 32 and 64-bit differences
        let a: Vec<i32> = vec![0, 5, -120, 300, -30000, 70000, i32::MIN, i32::MAX, -1, -2, 9, 10];
        let img = image(vec![panel(&a, 4, 3)]);
        let path = dir.join("x.cbf");
        std::fs::write(&path, crate::cbf::cbf_bytes(&img).unwrap()).unwrap();
        let got = read_image(&path, 0).unwrap();
        assert_eq!((got.format, got.fpixels, got.spixels), (ImageFormat::Cbf, 4, 3));
        assert_eq!(got.pixels, a.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
        assert_eq!(got.saturation, Some(f64::from(i32::MAX)));
        let value = |k: &str| got.header.iter().find(|(n, _)| n == k).unwrap().1.clone();
        assert_eq!(value("Wavelength"), "1 A");
        assert!(read_image(&path, 1).is_err());
        // cut short, the binary section is refused
        let bytes = std::fs::read(&path).unwrap();
        let start = bytes.windows(4).position(|w| w == BINARY_START).unwrap();
        std::fs::write(&path, &bytes[..start + 10]).unwrap();
        let err = read_image(&path, 0).unwrap_err().to_string();
        assert!(err.contains("the file ends first"), "{err}");
        std::fs::write(&path, b"not an image at all").unwrap();
        assert!(read_image(&path, 0).unwrap_err().to_string().contains("neither SMV"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
