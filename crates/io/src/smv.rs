//! SMV (ADSC) images: 16-bit pixels after an ASCII `KEY=value;` header.
//!
//! Writing reproduces the original program's header text byte for byte (every number
//! through C `%g`), with one deliberate difference: when the text does not fit in 512
//! bytes the original still claims `HEADER_BYTES=512` and starts the pixels right after
//! the header text, producing a file no reader can decode. Here the header is then
//! padded to the next multiple of 512 bytes and `HEADER_BYTES` says so.
//!
//! Reading follows the original program's lookup rules ([`header_value`]) but reports
//! malformed files as errors instead of reading garbage.

use std::io::Write;
use std::path::Path;

use crate::atomic::Pending;
use crate::{cfmt, IoError};

/// Smallest (and default) SMV header size in bytes.
pub const SMV_BLOCK: usize = 512;

/// The values written into an SMV header, in the units of the header.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SmvHeaderFields {
    /// `SIZE1`: pixels along the fast axis.
    pub fpixels: usize,
    /// `SIZE2`: pixels along the slow axis.
    pub spixels: usize,
    /// `PIXEL_SIZE` in mm.
    pub pixel_size_mm: f64,
    /// `DISTANCE` in mm.
    pub distance_mm: f64,
    /// `WAVELENGTH` in Å.
    pub wavelength_a: f64,
    /// `BEAM_CENTER_X` in mm.
    pub beam_center_x_mm: f64,
    /// `BEAM_CENTER_Y` in mm.
    pub beam_center_y_mm: f64,
    /// `ADXV_CENTER_X` in mm.
    pub adxv_center_x_mm: f64,
    /// `ADXV_CENTER_Y` in mm.
    pub adxv_center_y_mm: f64,
    /// `MOSFLM_CENTER_X` in mm.
    pub mosflm_center_x_mm: f64,
    /// `MOSFLM_CENTER_Y` in mm.
    pub mosflm_center_y_mm: f64,
    /// `DENZO_X_BEAM` in mm.
    pub denzo_x_beam_mm: f64,
    /// `DENZO_Y_BEAM` in mm.
    pub denzo_y_beam_mm: f64,
    /// `DIALS_ORIGIN` (three components) in mm.
    pub dials_origin_mm: [f64; 3],
    /// `XDS_ORGX` in pixels.
    pub xds_orgx: f64,
    /// `XDS_ORGY` in pixels.
    pub xds_orgy: f64,
    /// `CLOSE_DISTANCE` in mm.
    pub close_distance_mm: f64,
    /// `PHI` in degrees.
    pub phi_deg: f64,
    /// `OSC_START` in degrees.
    pub osc_start_deg: f64,
    /// `OSC_RANGE` in degrees.
    pub osc_range_deg: f64,
    /// `TWOTHETA` in degrees.
    pub twotheta_deg: f64,
}

impl From<&SmvHeaderFields> for SmvHeader {
    /// nanoBragg.c's header: its keys, in its order, every number through
    /// C `%g`.
    fn from(h: &SmvHeaderFields) -> SmvHeader {
        let [x, y, z] = h.dials_origin_mm.map(cfmt::g);
        SmvHeader::new(h.fpixels, h.spixels)
            .number("PIXEL_SIZE", h.pixel_size_mm)
            .number("DISTANCE", h.distance_mm)
            .number("WAVELENGTH", h.wavelength_a)
            .number("BEAM_CENTER_X", h.beam_center_x_mm)
            .number("BEAM_CENTER_Y", h.beam_center_y_mm)
            .number("ADXV_CENTER_X", h.adxv_center_x_mm)
            .number("ADXV_CENTER_Y", h.adxv_center_y_mm)
            .number("MOSFLM_CENTER_X", h.mosflm_center_x_mm)
            .number("MOSFLM_CENTER_Y", h.mosflm_center_y_mm)
            .number("DENZO_X_BEAM", h.denzo_x_beam_mm)
            .number("DENZO_Y_BEAM", h.denzo_y_beam_mm)
            // no semicolon after DIALS_ORIGIN, as in the original
            .line(&format!("DIALS_ORIGIN={x},{y},{z}"))
            .number("XDS_ORGX", h.xds_orgx)
            .number("XDS_ORGY", h.xds_orgy)
            .number("CLOSE_DISTANCE", h.close_distance_mm)
            .number("PHI", h.phi_deg)
            .number("OSC_START", h.osc_start_deg)
            .number("OSC_RANGE", h.osc_range_deg)
            .number("TWOTHETA", h.twotheta_deg)
            .entry("DETECTOR_SN", "000")
            .entry("BEAMLINE", "fake")
    }
}

/// An SMV header to write with [`write_smv`]: the `KEY=value;` lines that
/// follow the five every header starts with (`HEADER_BYTES`, `DIM`,
/// `BYTE_ORDER`, `TYPE`, which the writer fills in, then `SIZE1` and
/// `SIZE2`), or a header copied from another file. Each of the C programs
/// writes its own set of keys (nanoBragg.c's is [`SmvHeaderFields`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SmvHeader {
    fpixels: usize,
    spixels: usize,
    text: HeaderText,
}

#[derive(Debug, Clone, PartialEq)]
enum HeaderText {
    /// The lines after `SIZE2`, each with its line end.
    Lines(String),
    /// Written byte for byte (its `TYPE` and size as they are).
    Copied(Vec<u8>),
}

/// The pixel type of an SMV image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmvType {
    /// `TYPE=unsigned_short`: 2-byte pixels.
    U16,
    /// `TYPE=long_integer`: 4-byte pixels (noisify.c's `-bits 32`).
    U32,
}

impl SmvType {
    fn name(self) -> &'static str {
        match self {
            SmvType::U16 => "unsigned_short",
            SmvType::U32 => "long_integer",
        }
    }
}

impl SmvHeader {
    /// The header of an image of `fpixels` x `spixels` pixels (`SIZE1`,
    /// `SIZE2`), with no other keys yet.
    pub fn new(fpixels: usize, spixels: usize) -> SmvHeader {
        let lines = format!("SIZE1={fpixels};\nSIZE2={spixels};\n");
        SmvHeader { fpixels, spixels, text: HeaderText::Lines(lines) }
    }

    /// A header copied as it is from another file (noisify.c's `-header`),
    /// for an image of `fpixels` x `spixels` pixels.
    pub fn copied(bytes: Vec<u8>, fpixels: usize, spixels: usize) -> SmvHeader {
        SmvHeader { fpixels, spixels, text: HeaderText::Copied(bytes) }
    }

    /// Adds the line `KEY=value;` (to a copied header: nothing).
    pub fn entry(self, key: &str, value: impl std::fmt::Display) -> SmvHeader {
        self.line(&format!("{key}={value};"))
    }

    /// Adds `KEY=value;` with the number as C's `%g` writes it.
    pub fn number(self, key: &str, value: f64) -> SmvHeader {
        self.entry(key, cfmt::g(value))
    }

    /// Adds a line as it is.
    pub fn line(mut self, text: &str) -> SmvHeader {
        if let HeaderText::Lines(lines) = &mut self.text {
            lines.push_str(text);
            lines.push('\n');
        }
        self
    }

    /// The image's size, fast and slow.
    pub fn size(&self) -> (usize, usize) {
        (self.fpixels, self.spixels)
    }

    /// The header's bytes before pixels of `pixels`: up to and including the
    /// closing `}\f`, padded with spaces to the `HEADER_BYTES` it claims.
    ///
    /// That is 512 whenever the text fits, as the C programs write it;
    /// longer text is padded to the next multiple of 512 and `HEADER_BYTES`
    /// says so (the C programs claim 512 regardless, and the pixels then
    /// start where no reader looks for them).
    pub fn bytes(&self, pixels: SmvType) -> Vec<u8> {
        let lines = match &self.text {
            HeaderText::Copied(bytes) => return bytes.clone(),
            HeaderText::Lines(lines) => lines,
        };
        let mut header_bytes = SMV_BLOCK;
        loop {
            let mut text = format!(
                "{{\nHEADER_BYTES={header_bytes};\nDIM=2;\nBYTE_ORDER=little_endian;\nTYPE={};\n{lines}}}\u{c}",
                pixels.name()
            );
            let needed = text.len().div_ceil(SMV_BLOCK).max(1) * SMV_BLOCK;
            if needed == header_bytes {
                text.push_str(&" ".repeat(header_bytes - text.len()));
                return text.into_bytes();
            }
            // the size only grows, and a longer number adds few bytes: this terminates
            header_bytes = needed;
        }
    }
}

/// The complete header of nanoBragg.c's 16-bit images, padded with spaces
/// to its `HEADER_BYTES` length (see [`SmvHeader::bytes`]).
pub fn smv_header_text(fields: &SmvHeaderFields) -> String {
    let bytes = SmvHeader::from(fields).bytes(SmvType::U16);
    String::from_utf8(bytes).expect("the header is ASCII")
}

/// The bytes of a whole SMV file: nanoBragg.c's header then little-endian
/// `u16` pixels.
pub fn smv_bytes(fields: &SmvHeaderFields, pixels: &[u16]) -> Vec<u8> {
    let mut out = SmvHeader::from(fields).bytes(SmvType::U16);
    out.reserve(2 * pixels.len());
    for p in pixels {
        out.extend_from_slice(&p.to_le_bytes());
    }
    out
}

/// The pixels of an SMV image, fast index fastest.
pub enum SmvPixels<'a> {
    /// 2-byte pixels.
    U16(&'a [u16]),
    /// 4-byte pixels.
    U32(&'a [u32]),
    /// 2-byte pixels made as they are written: `fill(first_row, out)` fills
    /// `out` (whole rows) starting at slow index `first_row`. Where the file
    /// can be mapped ([`Pending::map`]) it is called once for the whole
    /// image, straight into the file's pages; otherwise a block of rows at
    /// a time into one buffer. Either way a large image is never held twice.
    Rows(&'a mut dyn FnMut(usize, &mut [u16])),
}

/// Writes an SMV image into `file`: `header` (see [`SmvHeader::bytes`]),
/// then the pixels in little-endian order. The pixels must number
/// `fpixels * spixels` of the header. The one writer of SMV files.
pub fn write_smv(
    file: &mut Pending,
    header: &SmvHeader,
    pixels: SmvPixels<'_>,
) -> Result<(), IoError> {
    let (fp, sp) = header.size();
    let given = match &pixels {
        SmvPixels::U16(p) => Some(p.len()),
        SmvPixels::U32(p) => Some(p.len()),
        SmvPixels::Rows(_) => None,
    };
    if given.is_some_and(|n| Some(n) != fp.checked_mul(sp)) {
        return Err(IoError::InvalidInput {
            path: file.target().to_path_buf(),
            reason: format!(
                "SMV image of {fp}x{sp} pixels given {} pixel values",
                given.unwrap_or_default()
            ),
        });
    }
    match pixels {
        SmvPixels::U16(p) => {
            let text = header.bytes(SmvType::U16);
            file.write(|w| {
                w.write_all(&text)?;
                crate::le::write_le(w, p)
            })
        }
        SmvPixels::U32(p) => {
            let text = header.bytes(SmvType::U32);
            file.write(|w| {
                w.write_all(&text)?;
                crate::le::write_le(w, p)
            })
        }
        SmvPixels::Rows(fill) => write_rows(file, header, fill),
    }
}

/// [`SmvPixels::Rows`] into `file`: into its mapping, else a block of rows
/// at a time.
fn write_rows(
    file: &mut Pending,
    header: &SmvHeader,
    fill: &mut dyn FnMut(usize, &mut [u16]),
) -> Result<(), IoError> {
    let text = header.bytes(SmvType::U16);
    let (fp, sp) = header.size();
    if let Some(mut map) = file.map(text.len() + 2 * fp * sp)? {
        map[..text.len()].copy_from_slice(&text);
        fill(0, crate::le::values_mut(&mut map[text.len()..]));
        return Ok(());
    }
    write_blocks(file, &text, fp, sp, fill)
}

/// [`write_rows`] through `write()`, a block of rows at a time.
fn write_blocks(
    file: &mut Pending,
    text: &[u8],
    fpixels: usize,
    spixels: usize,
    fill: &mut dyn FnMut(usize, &mut [u16]),
) -> Result<(), IoError> {
    let rows = (BLOCK_PIXELS / fpixels.max(1)).max(1);
    let mut buf = vec![0u16; rows * fpixels];
    file.write(|w| {
        w.write_all(text)?;
        let mut s = 0;
        while s < spixels {
            let n = rows.min(spixels - s);
            let block = &mut buf[..n * fpixels];
            fill(s, block);
            crate::le::write_le(w, block)?;
            s += n;
        }
        Ok(())
    })
}

/// Pixels per block of [`write_rows`] (512 KiB of 16-bit pixels).
const BLOCK_PIXELS: usize = 256 * 1024;

/// A decoded SMV image.
#[derive(Debug, Clone, PartialEq)]
pub struct SmvImage {
    /// The header text: the first `header_bytes` bytes of the file, cut at the first NUL
    /// byte (invalid UTF-8 replaced).
    pub header: String,
    /// Header size from `HEADER_BYTES`: the pixel data start at this offset.
    pub header_bytes: usize,
    /// Pixels along the fast axis (`SIZE1`).
    pub width: usize,
    /// Pixels along the slow axis (`SIZE2`).
    pub height: usize,
    /// `width * height` pixels, fast index fastest, in native order.
    pub data: Vec<u16>,
}

/// The geometry an SMV header gives, in the header's units: what
/// nanoBragg.c (`-img`, `-mask`), nonBragg.c (`-img`) and noisify.c
/// (`-header`) take from it. A key that is absent or reads as NaN is `None`.
/// Keys are found by [`header_value`]'s rules: `DISTANCE` is the last match,
/// so `CLOSE_DISTANCE`'s value when that key comes later, and `ORGX`
/// matches `XDS_ORGX`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SmvGeometry {
    /// `SIZE1` (else `DETECTOR_DIMENSIONS`): pixels along fast.
    pub width: usize,
    /// `SIZE2` (else `DETECTOR_DIMENSIONS`): pixels along slow.
    pub height: usize,
    /// `PIXEL_SIZE`, mm.
    pub pixel_size_mm: Option<f64>,
    /// `DISTANCE`, mm.
    pub distance_mm: Option<f64>,
    /// `CLOSE_DISTANCE`, mm.
    pub close_distance_mm: Option<f64>,
    /// `WAVELENGTH`, Å.
    pub wavelength_a: Option<f64>,
    /// `BEAM_CENTER_X`, mm.
    pub beam_center_x_mm: Option<f64>,
    /// `BEAM_CENTER_Y`, mm.
    pub beam_center_y_mm: Option<f64>,
    /// `ORGX`, pixels.
    pub orgx_px: Option<f64>,
    /// `ORGY`, pixels.
    pub orgy_px: Option<f64>,
    /// `PHI`, degrees.
    pub phi_deg: Option<f64>,
    /// `OSC_RANGE`, degrees.
    pub osc_range_deg: Option<f64>,
}

impl SmvGeometry {
    /// Each key with its value, `CLOSE_DISTANCE` before `DISTANCE` (which
    /// also matches it), for checks that name the key a value came from.
    pub fn values(&self) -> [(&'static str, Option<f64>); 10] {
        [
            ("PIXEL_SIZE", self.pixel_size_mm),
            ("CLOSE_DISTANCE", self.close_distance_mm),
            ("DISTANCE", self.distance_mm),
            ("WAVELENGTH", self.wavelength_a),
            ("BEAM_CENTER_X", self.beam_center_x_mm),
            ("BEAM_CENTER_Y", self.beam_center_y_mm),
            ("ORGX", self.orgx_px),
            ("ORGY", self.orgy_px),
            ("PHI", self.phi_deg),
            ("OSC_RANGE", self.osc_range_deg),
        ]
    }
}

impl SmvImage {
    /// The numeric value of `key` in the header with the original program's rules;
    /// see [`header_value`].
    pub fn value_of(&self, key: &str) -> Option<f64> {
        header_value(&self.header, key)
    }

    /// The geometry the header gives (the one reading of an SMV header into
    /// geometry; see [`SmvGeometry`]).
    pub fn geometry(&self) -> SmvGeometry {
        let get = |key: &str| self.value_of(key).filter(|v| !v.is_nan());
        SmvGeometry {
            width: self.width,
            height: self.height,
            pixel_size_mm: get("PIXEL_SIZE"),
            distance_mm: get("DISTANCE"),
            close_distance_mm: get("CLOSE_DISTANCE"),
            wavelength_a: get("WAVELENGTH"),
            beam_center_x_mm: get("BEAM_CENTER_X"),
            beam_center_y_mm: get("BEAM_CENTER_Y"),
            orgx_px: get("ORGX"),
            orgy_px: get("ORGY"),
            phi_deg: get("PHI"),
            osc_range_deg: get("OSC_RANGE"),
        }
    }

    /// Decodes an SMV file in memory for its header (`path` only names it
    /// in errors): the checks of [`SmvImage::parse`], but pixel data of any
    /// type, or shorter than the header says, is accepted; the image then
    /// has no `data` and the second value is the bytes the file would need
    /// and has. The header's own bytes are `bytes[..header_bytes]`.
    pub fn parse_header(
        bytes: &[u8],
        path: &Path,
    ) -> Result<(SmvImage, Option<(u64, u64)>), IoError> {
        Self::parse_with(bytes, path, false)
    }

    /// Decodes an SMV file already in memory; `path` is only used in error messages.
    ///
    /// Like the original, the file must start with `{\nHEADER_BYT`, `HEADER_BYTES`
    /// gives the header size (a fractional value is truncated) and `SIZE1`/`SIZE2` the
    /// dimensions (if `SIZE1` is absent or 0, `DETECTOR_DIMENSIONS` gives both).
    /// Unlike the original, a file shorter than 512 bytes, a missing, zero or
    /// non-numeric `HEADER_BYTES` or one beyond the end of the file, non-positive
    /// dimensions, and pixel data shorter than `width * height * 2` bytes are errors.
    ///
    /// Deliberate fix: when the last `BYTE_ORDER=` value is `big_endian` the pixels are
    /// byte-swapped. The original program detects this but never swaps. Any other value
    /// (or none) means little-endian. The pixels start exactly at `HEADER_BYTES` (the
    /// original rounds an odd value down to even).
    pub fn parse(bytes: &[u8], path: &Path) -> Result<SmvImage, IoError> {
        Self::parse_with(bytes, path, true).map(|(img, _)| img)
    }

    /// [`SmvImage::parse`], with pixel data shorter than the header says
    /// allowed when `!need_pixels`: the image then has no `data` and the
    /// second value is the bytes the file would need and has.
    fn parse_with(
        bytes: &[u8],
        path: &Path,
        need_pixels: bool,
    ) -> Result<(SmvImage, Option<(u64, u64)>), IoError> {
        let len = bytes.len() as u64;
        let bad = |reason: String| IoError::BadHeader { path: path.to_path_buf(), reason };
        if bytes.len() < SMV_BLOCK {
            return Err(IoError::TooShort {
                path: path.to_path_buf(),
                len,
                min: SMV_BLOCK as u64,
                what: "an SMV header",
            });
        }
        if !bytes.starts_with(b"{\nHEADER_BYT") {
            return Err(IoError::NotSmv { path: path.to_path_buf() });
        }
        let first_block = c_text(&bytes[..SMV_BLOCK]);
        let hb = header_value(&first_block, "HEADER_BYTES")
            .ok_or_else(|| bad("no HEADER_BYTES".to_string()))?;
        let hb = hb.trunc();
        if hb.is_nan() || hb < 1.0 {
            return Err(bad(format!(
                "HEADER_BYTES is {} (must be a positive number)",
                cfmt::g(hb)
            )));
        }
        if hb > len as f64 {
            return Err(bad(format!(
                "HEADER_BYTES={} is larger than the file ({len} bytes)",
                cfmt::g(hb)
            )));
        }
        let header_bytes = hb as usize;
        let header = c_text(&bytes[..header_bytes]);

        let size = |key: &str| header_value(&header, key).map(f64::trunc);
        let (mut w, mut h) = (size("SIZE1"), size("SIZE2"));
        if w.unwrap_or(0.0) == 0.0 {
            if let Some(d) = size("DETECTOR_DIMENSIONS") {
                w = Some(d);
                h = Some(d);
            }
        }
        let check_dim = |v: Option<f64>, key: &str| -> Result<usize, IoError> {
            match v {
                None => Err(bad(format!("no {key}"))),
                Some(v) if v >= 1.0 && v <= u32::MAX as f64 => Ok(v as usize),
                Some(v) => Err(bad(format!("{key}={} is not a positive image size", cfmt::g(v)))),
            }
        };
        let width = check_dim(w, "SIZE1")?;
        let height = check_dim(h, "SIZE2")?;

        let pixel_bytes = (width as u64) * (height as u64) * 2;
        let needed = header_bytes as u64 + pixel_bytes;
        if needed > len && !need_pixels {
            let img = SmvImage { header, header_bytes, width, height, data: Vec::new() };
            return Ok((img, Some((needed, len))));
        }
        if needed > len {
            return Err(IoError::Truncated {
                path: path.to_path_buf(),
                what: "the SMV pixel data",
                expected: needed,
                actual: len,
            });
        }
        // (the pixels are read as 2-byte integers: 4-byte ones, as -bits 32
        // writes, would be read as two pixels each; a header alone, -img's,
        // is read from any)
        let pixel_type = header
            .split(['\n', ';'])
            .filter_map(|field| field.trim().strip_prefix("TYPE="))
            .next_back()
            .map(str::trim);
        if let Some(t) =
            pixel_type.filter(|t| need_pixels && !t.is_empty() && *t != "unsigned_short")
        {
            return Err(bad(format!(
                "TYPE={t}: only 2-byte pixels (TYPE=unsigned_short) are read"
            )));
        }
        let big_endian =
            last_after(&header, "BYTE_ORDER=").is_some_and(|rest| rest.starts_with("big_endian"));
        let raw = &bytes[header_bytes..needed as usize];
        let data = raw
            .chunks_exact(2)
            .map(|c| {
                let pair = [c[0], c[1]];
                if big_endian {
                    u16::from_be_bytes(pair)
                } else {
                    u16::from_le_bytes(pair)
                }
            })
            .collect();
        Ok((SmvImage { header, header_bytes, width, height, data }, None))
    }
}

/// Reads an SMV file for its header only (what `-img` uses): the checks of
/// [`SmvImage::parse`] but pixel data shorter than the header says is
/// accepted, as nanoBragg.c does; the image then has no `data` and the
/// second value is the bytes the file would need and has.
pub fn read_smv_header(path: &Path) -> Result<(SmvImage, Option<(u64, u64)>), IoError> {
    let bytes = crate::read_all(path)?;
    SmvImage::parse_with(&bytes, path, false)
}

/// Reads an SMV image file; see [`SmvImage::parse`] for the rules and errors.
pub fn read_smv(path: &Path) -> Result<SmvImage, IoError> {
    let bytes = crate::read_all(path)?;
    SmvImage::parse(&bytes, path)
}

/// Text of a C string held in `bytes`: up to the first NUL.
fn c_text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The text after the last occurrence of `key`, scanning left to right for
/// non-overlapping matches as the original does; `None` if `key` does not occur.
fn last_after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    if key.is_empty() {
        return None;
    }
    let mut found = None;
    let mut start = 0;
    while let Some(i) = text[start..].find(key) {
        start += i + key.len();
        found = Some(start);
    }
    found.map(|i| &text[i..])
}

/// Looks up a numeric header value with the original program's rules.
///
/// The key is searched as a plain substring, and the last occurrence wins: `DISTANCE`
/// also matches inside `CLOSE_DISTANCE`, so it yields the close distance whenever that
/// key comes later in the header (as in every header this program writes). The value is
/// read with C `atof` semantics after the next `=` following the match, wherever that
/// is; text that is not a number gives 0.0, and so does a match with no `=` after it.
/// Returns `None` if the key does not occur at all (the original returns NaN).
pub fn header_value(header: &str, key: &str) -> Option<f64> {
    let rest = last_after(header, key)?;
    Some(match rest.find('=') {
        Some(i) => atof(&rest[i + 1..]),
        None => 0.0,
    })
}

/// C `atoi` as glibc implements it: `strtol` (leading white space, an
/// optional sign, decimal digits; saturating at the `long` range; 0 when
/// there are no digits), then converted to `int` by keeping the low 32 bits.
pub fn atoi(s: &str) -> i32 {
    let b = s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']).as_bytes();
    let (neg, digits) = match b.first() {
        Some(b'-') => (true, &b[1..]),
        Some(b'+') => (false, &b[1..]),
        _ => (false, b),
    };
    let mut v: i128 = 0;
    for &d in digits.iter().take_while(|d| d.is_ascii_digit()) {
        v = (v * 10 + (d - b'0') as i128).min(i64::MAX as i128 + 1);
    }
    let v = if neg { -v } else { v };
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64 as i32
}

/// C `atof`: leading white space, an optional sign, then a decimal number
/// (`12`, `1.5`, `.5`, `3.`, with an optional exponent), a hexadecimal one (`0x1.8p3`),
/// `inf`, `infinity` or `nan` (any case); anything after the number is ignored and no
/// number at all gives 0.0.
///
/// Decimal numbers are correctly rounded, like glibc; hexadecimal ones with more than
/// 13 significant digits may differ from glibc in the last bit.
pub fn atof(s: &str) -> f64 {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        i += 1;
    }
    let mut neg = false;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        neg = b[i] == b'-';
        i += 1;
    }
    let rest = &b[i..];
    let starts_ci =
        |word: &[u8]| rest.len() >= word.len() && rest[..word.len()].eq_ignore_ascii_case(word);
    let magnitude = if starts_ci(b"inf") {
        f64::INFINITY
    } else if starts_ci(b"nan") {
        f64::NAN
    } else if starts_ci(b"0x") {
        parse_hex(&rest[2..]).unwrap_or(0.0)
    } else {
        parse_decimal(rest)
    };
    if neg {
        -magnitude
    } else {
        magnitude
    }
}

/// The longest decimal number at the start of `b` (no sign), or 0.0.
fn parse_decimal(b: &[u8]) -> f64 {
    let digits = |from: usize| b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let int_digits = digits(0);
    let mut end = int_digits;
    let mut frac_digits = 0;
    if end < b.len() && b[end] == b'.' {
        frac_digits = digits(end + 1);
        end += 1 + frac_digits;
    }
    if int_digits + frac_digits == 0 {
        return 0.0;
    }
    if end < b.len() && (b[end] == b'e' || b[end] == b'E') {
        let mut j = end + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let exp_digits = digits(j);
        if exp_digits > 0 {
            end = j + exp_digits;
        }
    }
    // the slice is ASCII digits, '.', 'e' and a sign: always valid UTF-8 and a valid
    // Rust float literal (Rust accepts "1." and ".5")
    std::str::from_utf8(&b[..end]).ok().and_then(|t| t.parse().ok()).unwrap_or(0.0)
}

/// A hexadecimal float after the `0x` prefix (no sign), or `None` without hex digits.
fn parse_hex(b: &[u8]) -> Option<f64> {
    let mut mant = 0.0f64;
    let mut exp2: i64 = 0;
    let mut any = false;
    let mut i = 0;
    let mut seen_point = false;
    while i < b.len() {
        let c = b[i];
        if c == b'.' && !seen_point {
            seen_point = true;
        } else if let Some(d) = (c as char).to_digit(16) {
            any = true;
            mant = mant * 16.0 + d as f64;
            if seen_point {
                exp2 -= 4;
            }
        } else {
            break;
        }
        i += 1;
    }
    if !any {
        return None;
    }
    if i < b.len() && (b[i] == b'p' || b[i] == b'P') {
        let mut j = i + 1;
        let mut neg = false;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            neg = b[j] == b'-';
            j += 1;
        }
        let start = j;
        let mut e: i64 = 0;
        while j < b.len() && b[j].is_ascii_digit() {
            e = (e * 10 + (b[j] - b'0') as i64).min(100_000);
            j += 1;
        }
        if j > start {
            exp2 += if neg { -e } else { e };
        }
    }
    // scale in steps so that intermediate powers of two stay finite
    let mut v = mant;
    let mut e = exp2.clamp(-5000, 5000);
    while e != 0 {
        let step = e.clamp(-1000, 1000);
        v *= 2f64.powi(step as i32);
        e -= step;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_writers_give_the_same_file() {
        let dir = std::env::temp_dir().join(format!("nanobragg-io-smvrows-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // 700 x 900 pixels: the blocks (374 rows) do not divide the rows
        let fields = SmvHeaderFields { fpixels: 700, spixels: 900, ..Default::default() };
        let image: Vec<f32> = (0..700 * 900).map(|i| (i % 977) as f32 * 0.37).collect();
        let roi = [5, 650, 3, 880];
        let want = smv_bytes(&fields, &crate::pgm::int_image(&image, 700, 900, roi, 2.5, 40.0));
        let mut fill = |row: usize, out: &mut [u16]| {
            crate::pgm::int_rows(&image, 700, roi, 2.5, 40.0, row, out)
        };
        let header = SmvHeader::from(&fields);
        let (a, b) = (dir.join("a.img"), dir.join("b.img"));
        let mut file = Pending::create(&a).unwrap();
        write_smv(&mut file, &header, SmvPixels::Rows(&mut fill)).unwrap();
        file.commit().unwrap();
        let mut file = Pending::create(&b).unwrap();
        let text = header.bytes(SmvType::U16);
        write_blocks(&mut file, &text, 700, 900, &mut fill).unwrap();
        file.commit().unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), want);
        assert_eq!(std::fs::read(&b).unwrap(), want);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn atoi_like_c() {
        assert_eq!(atoi(" 12abc"), 12);
        assert_eq!(atoi("-7"), -7);
        assert_eq!(atoi("x1"), 0);
        assert_eq!(atoi("4294967297"), 1);
        assert_eq!(atoi("99999999999999999999"), -1);
        assert_eq!(atoi("-99999999999999999999"), 0);
    }

    #[test]
    fn atof_like_c() {
        assert_eq!(atof("  512;"), 512.0);
        assert_eq!(atof("-6.5,6.5"), -6.5);
        assert_eq!(atof("+.5x"), 0.5);
        assert_eq!(atof("3.;"), 3.0);
        assert_eq!(atof("1e3;"), 1000.0);
        assert_eq!(atof("1e;"), 1.0);
        assert_eq!(atof("1e+;"), 1.0);
        assert_eq!(atof("2.5E-2"), 0.025);
        assert_eq!(atof("abc"), 0.0);
        assert_eq!(atof(""), 0.0);
        assert_eq!(atof("-"), 0.0);
        assert_eq!(atof("."), 0.0);
        assert_eq!(atof("\t\n\u{b}\u{c}\r 7"), 7.0);
        assert_eq!(atof("0x1.8p3"), 12.0);
        assert_eq!(atof("0x10"), 16.0);
        assert_eq!(atof("0xg"), 0.0);
        assert_eq!(atof("-INF"), f64::NEG_INFINITY);
        assert_eq!(atof("Infinity"), f64::INFINITY);
        assert!(atof("nan").is_nan());
        assert!(atof("-nan").is_sign_negative());
        assert_eq!(atof("0.1000000000000000055511151231257827"), 0.1);
        assert_eq!(atof("1e400"), f64::INFINITY);
    }

    #[test]
    fn pixels_of_another_type_are_refused() {
        let file = |t: &str, pixel_bytes: usize| {
            let mut b =
                format!("{{\nHEADER_BYTES=512;\nTYPE={t};\nSIZE1=2;\nSIZE2=2;\n}}\n").into_bytes();
            b.resize(512 + 4 * pixel_bytes, 0);
            b
        };
        let at = Path::new("x.img");
        let e = SmvImage::parse(&file("long_integer", 4), at).unwrap_err().to_string();
        assert!(e.contains("TYPE=long_integer: only 2-byte pixels"), "{e}");
        // its header alone is read; 2-byte pixels are
        assert!(SmvImage::parse_with(&file("long_integer", 4), at, false).is_ok());
        assert_eq!(SmvImage::parse(&file("unsigned_short", 2), at).unwrap().data, vec![0; 4]);
    }

    #[test]
    fn header_value_semantics() {
        let h = "{\nDISTANCE=100;\nCLOSE_DISTANCE=98.5;\nPHI=1\nX=\nNOEQ";
        assert_eq!(header_value(h, "DISTANCE"), Some(98.5));
        assert_eq!(header_value(h, "\nDISTANCE"), Some(100.0));
        assert_eq!(header_value(h, "PHI"), Some(1.0));
        // the value after X= is the text "\nNOEQ": not a number
        assert_eq!(header_value(h, "X"), Some(0.0));
        assert_eq!(header_value(h, "NOEQ"), Some(0.0));
        assert_eq!(header_value(h, "MISSING"), None);
        assert_eq!(header_value(h, ""), None);
        // the '=' may be far from the key
        assert_eq!(header_value("KEY;\nOTHER=5;", "KEY"), Some(5.0));
        // non-overlapping left-to-right matching: in "AAA=1", "AA" matches at 0 only
        assert_eq!(header_value("AAA=1", "AA"), Some(1.0));
    }
}
