//! `nanobragg noisify`: noisify.c's command line, files and console output.
//!
//! Turns an ideal photons/pixel float image into the images an area
//! detector records (see [`nanobragg_core::response`] and
//! [`nanobragg_core::psf`]): a noiseless integer image, a PGM preview and
//! a noise image. The arguments are read as the reference reads them: each
//! one is tested against every option name as a substring, a value is taken
//! from the next argument without consuming it, and an argument containing
//! `floatimage.bin` is the input. docs/compat.md lists what differs.

use std::io::Write;
use std::path::Path;

use crate::detector_response::report_psf;
use crate::image_headers::parallel_noise_header;
use crate::output_files::{open_output, write_error};
use anyhow::{anyhow, bail, Context, Result};
use nanobragg_core::geometry::PanelLayout;
use nanobragg_core::noise_stream::{NoiseStream, PixelStream};
use nanobragg_core::psf::PsfShape;
use nanobragg_core::response::{
    adu_pixels, noisy_image, noisy_image_parallel, Bits, Response, SharedSeeds,
};
use nanobragg_io::atomic::Pending;
use nanobragg_io::cfmt::{f, g};
use nanobragg_io::image_writer::{self, Image, SmvHeader, SmvPixels};
use nanobragg_io::smv::{atof, atoi, SmvGeometry, SmvImage};

/// r_e², the Thomson cross section per steradian (m²).
const R_E_SQR: f64 = 7.94079248018965e-30;

/// Everything the command line sets, with noisify.c's defaults.
#[derive(Debug, Clone)]
struct Options {
    float_name: Option<String>,
    header_name: Option<String>,
    int_name: String,
    pgm_name: String,
    noise_name: String,
    write_noise: bool,
    write_pgm: bool,
    bits: i32,
    distance_m: f64,
    detsize_m: [f64; 2],
    pixel_m: f64,
    xbeam_m: f64,
    ybeam_m: f64,
    detpixels: [i32; 2],
    lambda_a: f64,
    phi_deg: f64,
    osc_deg: f64,
    psf: Option<PsfShape>,
    /// The FWHM in metres, held in single precision as the reference does.
    psf_fwhm_m: f32,
    psf_radius: i32,
    fluence: f64,
    scale: f64,
    gain: f64,
    adc: f64,
    readout: f64,
    flicker: f64,
    calibration: f64,
    /// Seed words as the reference holds them (minus the user's values).
    seed: i64,
    calib_seed: i64,
    /// `-noise_rng`: C's serial stream (the default) or the parallel one.
    noise_rng: NoiseStream,
    /// Console lines printed while reading the arguments (unknown PSF types).
    warnings: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        Options {
            float_name: None,
            header_name: None,
            int_name: "intimage.img".into(),
            pgm_name: "image.pgm".into(),
            noise_name: "noiseimage.img".into(),
            write_noise: true,
            write_pgm: true,
            bits: 16,
            distance_m: 0.1,
            detsize_m: [0.1024, 0.1024],
            pixel_m: 0.1e-3,
            xbeam_m: -1e99,
            ybeam_m: -1e99,
            detpixels: [0, 0],
            lambda_a: 1.0,
            phi_deg: 0.0,
            osc_deg: 1.0,
            psf: None,
            psf_fwhm_m: 46e-6,
            psf_radius: 0,
            fluence: 125932015286227086360700780544.0,
            scale: 1.0,
            gain: 1.0,
            adc: 40.0,
            readout: 0.0,
            flicker: 0.0,
            calibration: 0.03,
            seed: -now,
            calib_seed: 123456789,
            noise_rng: NoiseStream::C,
            warnings: Vec::new(),
        }
    }
}

/// What an option does with its value.
#[derive(Clone, Copy)]
enum Set {
    Lambda,
    Xbeam,
    Ybeam,
    Distance,
    Detsize,
    DetsizeX,
    DetsizeY,
    Detpixels,
    DetpixelsX,
    DetpixelsY,
    Pixel,
    Psf,
    PsfRadius,
    PsfFwhm,
    Fluence,
    Float,
    Header,
    Pgm,
    Int,
    Bits,
    Noise,
    NoNoise,
    NoPgm,
    Readout,
    Flicker,
    Calibration,
    Scale,
    Seed,
    NoiseRng,
    CalibSeed,
    /// `-hotpix_seed`, `-badpix_seed`: the reference reads them and simulates
    /// no hot or bad pixels.
    UnusedSeed,
    Adc,
    Gain,
    Phi,
    Osc,
}

/// One option: the substrings that select it, whether the argument must be
/// exactly that long (the reference's `strlen` tests), and whether it takes
/// the next argument as its value.
struct Opt {
    names: &'static [&'static str],
    exact_len: bool,
    takes_value: bool,
    set: Set,
}

const fn opt(names: &'static [&'static str], set: Set) -> Opt {
    Opt { names, exact_len: false, takes_value: true, set }
}

/// The options in the order the reference tests them (order matters: every
/// match applies, so `-detsize_x` after `-detsize` wins).
const OPTIONS: &[Opt] = &[
    opt(&["-lambda"], Set::Lambda),
    opt(&["-Xbeam"], Set::Xbeam),
    opt(&["-Ybeam"], Set::Ybeam),
    opt(&["-distance"], Set::Distance),
    Opt { names: &["-detsize"], exact_len: true, takes_value: true, set: Set::Detsize },
    opt(&["-detsize_x"], Set::DetsizeX),
    opt(&["-detsize_y"], Set::DetsizeY),
    Opt { names: &["-detpixels"], exact_len: true, takes_value: true, set: Set::Detpixels },
    opt(&["-detpixels_x"], Set::DetpixelsX),
    opt(&["-detpixels_y"], Set::DetpixelsY),
    opt(&["-pixel"], Set::Pixel),
    Opt { names: &["-psf"], exact_len: true, takes_value: true, set: Set::Psf },
    opt(&["-psf_rad"], Set::PsfRadius),
    opt(&["-psf_si", "-psf_fw", "-psf_wi"], Set::PsfFwhm),
    opt(&["-fluence"], Set::Fluence),
    opt(&["-floatfile", "-floatimage", "-bin"], Set::Float),
    opt(&["-header"], Set::Header),
    opt(&["-pgmfile", "-pgmimage"], Set::Pgm),
    opt(&["-intfile", "-intimage"], Set::Int),
    opt(&["-bits"], Set::Bits),
    opt(&["-noisefile", "-noiseimage"], Set::Noise),
    Opt { names: &["-nonoise"], exact_len: false, takes_value: false, set: Set::NoNoise },
    Opt { names: &["-nopgm"], exact_len: false, takes_value: false, set: Set::NoPgm },
    opt(&["-readout", "-readnoi"], Set::Readout),
    opt(&["-flicker"], Set::Flicker),
    opt(&["-calibration"], Set::Calibration),
    opt(&["-scale"], Set::Scale),
    opt(&["-seed"], Set::Seed),
    opt(&["-calib_seed"], Set::CalibSeed),
    opt(&["-badpix_seed", "-hotpix_seed"], Set::UnusedSeed),
    opt(&["-adc"], Set::Adc),
    Opt { names: &["-noise_rng"], exact_len: true, takes_value: true, set: Set::NoiseRng },
    opt(&["-gain"], Set::Gain),
    opt(&["-phi"], Set::Phi),
    opt(&["-osc"], Set::Osc),
];

/// The usage text the reference prints when it has no input image.
const USAGE: &str = "usage: noisify -floatfile floatimage.bin
options:
\tfloatimage.bin\t nearBragg-style binary dump file
\t-scale\tscale factor to put floatimage.bin in photons/pixel
\t-gain\tpixel units per photon
\t-readout_noise\tgaussian noise added to every pixel
\t-flicker\t fractional 1/f noise in source
\t-calibration\t static fractional error per pixel
\t-calib_seed\t change seed for calibration error
\t-seed\t specify seed for all non-calibration errors
\t-gain\t pixel units per photon
\t-adc\t offset added to each pixel after noise
\t-distance\t distance from origin to detector center in mm
\t-detsize\t detector size in mm
\t-pixel\t detector pixel size in mm
\t-psf gauss|fiber\t point spread function type (gaussian or fiber)
\t-psf_fwhm\t point spread function size in um
\t-psf_radius\t radius to render PSF in pixels (default automatic)
\t-lambda\t incident x-ray wavelength in Angstrom
\t-intfile\t name of smv-formatted output file (arbitrary scale)
\t-pgmfile\tname of pgm-formatted output file (arbitrary scale)
\t-noisefile\t name of smv-formatted output file (with noise)
\t-Xbeam\t image X coordinate of direct-beam spot (mm)
\t-Ybeam\t image Y coordinate of direct-beam spot (mm)
\t-header\t import 512-byte header from specified SMV file
";

/// Reads the arguments as noisify.c does. Arguments that select no option
/// and are no option's value are named in the returned list (the reference
/// ignores them silently; we warn).
fn parse(args: &[String]) -> Result<(Options, Vec<String>)> {
    let mut o = Options::default();
    let mut unused = Vec::new();
    let mut is_value = vec![false; args.len()];
    for (i, arg) in args.iter().enumerate() {
        if arg.contains("floatimage.bin") {
            o.float_name = Some(arg.clone());
            continue;
        }
        if !arg.starts_with('-') {
            if !is_value[i] {
                unused.push(arg.clone());
            }
            continue;
        }
        let value = args.get(i + 1);
        let mut matched = false;
        for opt in OPTIONS {
            let hit = opt
                .names
                .iter()
                .any(|n| arg.contains(n) && (!opt.exact_len || arg.len() == n.len()));
            if !hit {
                continue;
            }
            if !opt.takes_value {
                apply(&mut o, opt.set, "")?;
                matched = true;
            } else if let Some(v) = value {
                apply(&mut o, opt.set, v)?;
                is_value[i + 1] = true;
                matched = true;
            } else if matches!(opt.set, Set::Psf) {
                bail!("-psf needs a value (gauss or fiber)");
            }
        }
        if !matched && !is_value[i] {
            unused.push(arg.clone());
        }
    }
    Ok((o, unused))
}

/// Applies one option's value with C `atof`/`atoi` semantics.
fn apply(o: &mut Options, set: Set, v: &str) -> Result<()> {
    let mm = || atof(v) / 1000.0;
    match set {
        Set::Lambda => o.lambda_a = atof(v),
        Set::Xbeam => o.xbeam_m = mm(),
        Set::Ybeam => o.ybeam_m = mm(),
        Set::Distance => o.distance_m = mm(),
        Set::Detsize => o.detsize_m = [mm(), mm()],
        Set::DetsizeX => o.detsize_m[0] = mm(),
        Set::DetsizeY => o.detsize_m[1] = mm(),
        Set::Detpixels => o.detpixels = [atoi(v), atoi(v)],
        Set::DetpixelsX => o.detpixels[0] = atoi(v),
        Set::DetpixelsY => o.detpixels[1] = atoi(v),
        Set::Pixel => o.pixel_m = mm(),
        Set::Psf => {
            o.psf = if v.contains("fiber") {
                Some(PsfShape::Fiber)
            } else if v.contains("gauss") {
                Some(PsfShape::Gauss)
            } else {
                o.warnings.push(format!("WARNING: unknown psf type: {v}"));
                None
            }
        }
        Set::PsfRadius => {
            let r = atof(v);
            if r < 0.0 {
                bail!("-psf_radius: '{v}' is not allowed (a radius in pixels, 0 for automatic)");
            }
            o.psf_radius = r.min(i32::MAX as f64) as i32;
        }
        Set::PsfFwhm => o.psf_fwhm_m = (atof(v) / 1e6) as f32,
        Set::Fluence => o.fluence = atof(v),
        Set::Float => o.float_name = Some(v.to_string()),
        Set::Header => o.header_name = Some(v.to_string()),
        Set::Pgm => o.pgm_name = v.to_string(),
        Set::Int => o.int_name = v.to_string(),
        Set::Bits => {
            o.bits = atoi(v);
            if o.bits != 16 && o.bits != 32 {
                bail!("-bits: '{v}' is not allowed (16 or 32)");
            }
        }
        Set::Noise => o.noise_name = v.to_string(),
        Set::NoNoise => o.write_noise = false,
        Set::NoPgm => o.write_pgm = false,
        Set::Readout => o.readout = atof(v),
        Set::Flicker => o.flicker = atof(v),
        Set::Calibration => o.calibration = atof(v),
        Set::Scale => o.scale = atof(v),
        Set::NoiseRng => {
            o.noise_rng = NoiseStream::parse(v)
                .ok_or_else(|| anyhow!("-noise_rng: '{v}' is not a noise stream (c or parallel)"))?
        }
        Set::Seed => o.seed = -(atoi(v) as i64),
        Set::CalibSeed => o.calib_seed = -(atoi(v) as i64),
        Set::UnusedSeed => {}
        Set::Adc => o.adc = atof(v),
        Set::Gain => o.gain = atof(v),
        Set::Phi => o.phi_deg = atof(v),
        Set::Osc => o.osc_deg = atof(v),
    }
    Ok(())
}

/// The SMV header given with `-header`: its first `HEADER_BYTES` bytes
/// (copied into the images written) and the geometry they give.
struct HeaderFile {
    bytes: Vec<u8>,
    geometry: SmvGeometry,
}

/// Reads `-header`'s file as the reference's `GetFrame` does (printing
/// "reading NAME").
fn read_header(name: &str, out: &mut impl Write) -> Result<HeaderFile> {
    let data = std::fs::read(name).with_context(|| format!("-header {name}: cannot read"))?;
    let (img, _) =
        SmvImage::parse_header(&data, Path::new(name)).map_err(|e| anyhow!("-header {e}"))?;
    writeln!(out, "reading {name}")?;
    Ok(HeaderFile { bytes: data[..img.header_bytes].to_vec(), geometry: img.geometry() })
}

/// The header noisify.c writes when it is given none (`C %g` numbers).
fn own_header(o: &Options, x: usize, y: usize) -> SmvHeader {
    let detsize_y = o.pixel_m * y as f64;
    SmvHeader::new(x, y)
        .number("PIXEL_SIZE", o.pixel_m * 1000.0)
        .number("DISTANCE", o.distance_m * 1000.0)
        .number("WAVELENGTH", o.lambda_a)
        .number("BEAM_CENTER_X", o.xbeam_m * 1000.0)
        .number("BEAM_CENTER_Y", (detsize_y - o.ybeam_m) * 1000.0)
        .number("PHI", o.phi_deg)
        .number("OSC_START", o.phi_deg)
        .number("OSC_RANGE", o.osc_deg)
        .entry("DETECTOR_SN", "000")
        .entry("BEAMLINE", "fake")
}

/// The image's width and height: from `-header`, the flags, or a guess
/// from the pixel count (printing the reference's warning).
fn dimensions(
    o: &Options,
    header: Option<&HeaderFile>,
    pixels: i64,
    out: &mut impl Write,
) -> Result<(i64, i64)> {
    let [mut x, mut y] = o.detpixels.map(i64::from);
    if let Some(h) = header {
        (x, y) = (h.geometry.width as i64, h.geometry.height as i64);
    }
    let mut pixels = pixels;
    if header.is_some() {
        pixels = x * y;
    }
    if x == 0 && y == 0 {
        writeln!(out, "WARNING: guessing xy pixel dimensions.")?;
        if pixels == 0 {
            bail!("the input image is empty: no pixel dimensions to guess");
        }
        x = (pixels as f64).sqrt() as i64;
        y = pixels / x;
        while pixels != x * y && x > 0 {
            x -= 1;
            y = if x > 0 { pixels / x } else { y };
        }
        if pixels != x * y {
            (x, y) = (pixels, 1);
        }
    }
    if x != 0 && y == 0 {
        y = pixels / x;
    }
    if x == 0 && y != 0 {
        x = pixels / y;
    }
    if x <= 0 || y <= 0 {
        bail!("an image of {x} x {y} pixels has no pixels (-detpixels_x/-detpixels_y, -header or the input's size)");
    }
    Ok((x, y))
}

/// Runs noisify with its command line (without the program name), printing
/// to `out`.
pub fn run(args: &[String], out: &mut impl Write) -> Result<()> {
    let (mut o, unused) = parse(args)?;
    for w in &o.warnings {
        writeln!(out, "{w}")?;
    }
    for u in &unused {
        let shown: String = u.chars().take(60).collect::<String>().escape_debug().to_string();
        eprintln!("warning: noisify ignores the argument '{shown}'");
    }
    writeln!(out, "noisify - add noise to pixels - James Holton 3-19-16")?;
    let float_name = match &o.float_name {
        Some(name) if std::fs::metadata(name).is_ok_and(|m| m.is_file()) => name.clone(),
        other => {
            write!(out, "{USAGE}")?;
            match other {
                Some(name) => bail!("cannot read the input float image {name}"),
                None => bail!("no input float image (-floatfile FILE)"),
            }
        }
    };
    let file_len = std::fs::metadata(&float_name).map_or(0, |m| m.len()) as u128;
    fits_in_memory(file_len, || format!("the input float image {float_name}"))?;
    let data = std::fs::read(&float_name).with_context(|| format!("cannot read {float_name}"))?;
    let header = match &o.header_name {
        Some(name) => {
            writeln!(out, "taking header from {name}")?;
            Some(read_header(name, out)?)
        }
        None => None,
    };
    if let Some(HeaderFile { geometry: h, .. }) = &header {
        if let Some(v) = h.pixel_size_mm {
            o.pixel_m = v / 1000.0;
        }
        o.detsize_m = [o.pixel_m * h.width as f64, o.pixel_m * h.height as f64];
        if let Some(v) = h.distance_mm {
            o.distance_m = v / 1000.0;
        }
        if let Some(v) = h.wavelength_a {
            o.lambda_a = v / 1e10;
        }
        if let Some(v) = h.beam_center_x_mm {
            o.xbeam_m = v / 1000.0;
        }
        if let Some(v) = h.beam_center_y_mm {
            o.ybeam_m = o.detsize_m[1] - v / 1000.0;
        }
    }
    let (x, y) = dimensions(&o, header.as_ref(), (data.len() / 4) as i64, out)?;
    let pixels = x.checked_mul(y).filter(|&n| n <= i32::MAX as i64).with_context(|| {
        format!("an image of {x} x {y} pixels is larger than noisify can hold (2^31 pixels)")
    })? as usize;
    // the input's bytes, the float, photon and count images, the PSF's, both integer images
    fits_in_memory(file_len + pixels as u128 * 30, || format!("a {x} x {y} pixel image"))?;
    let (x, y) = (x as usize, y as usize);
    // every output opened before the images are made: a name that cannot
    // be written is refused before any file changes
    let open = |flag, name: &str| open_output(flag, Path::new(name));
    let mut int_file = open("-intfile", &o.int_name)?;
    let mut pgm_file = o.write_pgm.then(|| open("-pgmfile", &o.pgm_name)).transpose()?;
    let mut noise_file = o.write_noise.then(|| open("-noisefile", &o.noise_name)).transpose()?;
    o.detsize_m = [o.pixel_m * x as f64, o.pixel_m * y as f64];
    writeln!(out, "importing {pixels} pixel intensites: {float_name}")?;
    if data.len() < pixels {
        bail!("{float_name}: {} bytes, too short for {x} x {y} pixels", data.len());
    }
    // up to four bytes per pixel are read; pixels past the file's end are 0
    let mut image = zeros(pixels, x, y)?;
    for (v, b) in image.iter_mut().zip(data.chunks_exact(4)) {
        *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    if o.xbeam_m <= -1e99 {
        o.xbeam_m = o.detsize_m[0] / 2.0;
    }
    if o.ybeam_m <= -1e99 {
        o.ybeam_m = o.detsize_m[1] / 2.0;
    }
    if !o.write_noise {
        (o.calibration, o.readout, o.flicker) = (0.0, 0.0, 0.0);
    }
    report_options(&o, x, y, out)?;

    let photon_scale = o.fluence * R_E_SQR;
    let mut max_i = 0.0f64;
    let mut photons = zeros(pixels, x, y)?;
    photons.clear();
    for &v in &image {
        let v = v as f64;
        if max_i < v {
            max_i = v;
        }
        if v < 0.0 {
            writeln!(out, "WARNING: negative intensity in {float_name}: {}", g(v))?;
        }
        photons.push((photon_scale * o.scale * v) as f32);
    }
    drop(image);
    writeln!(
        out,
        "maximum value in input file: {} ( {} on photon scale)",
        g(max_i),
        g(max_i * o.scale * o.fluence * R_E_SQR)
    )?;
    let fwhm_pixels = o.psf_fwhm_m as f64 / o.pixel_m;
    let psf = o.psf.filter(|_| o.psf_fwhm_m > 0.0).map(|shape| (shape, fwhm_pixels, o.psf_radius));
    if let (false, Some((shape, w, r))) = (o.write_noise, psf) {
        writeln!(out, "  applying PSF to noiseless image width = {} pixels", g(w))?;
        // the parallel stream's PSF is one kernel for every pixel
        let applied = match o.noise_rng {
            NoiseStream::C => nanobragg_core::psf::apply_psf(&photons, x, y, shape, w, r),
            NoiseStream::Parallel => {
                nanobragg_core::psf_convolution::spread(&photons, x, y, shape, w, r)
            }
        };
        report_psf(&applied, out)?;
        photons = applied.image;
    }

    let noiseless: Vec<(u16, u32)> = photons
        .iter()
        .map(|&p| {
            let adu = p as f64 * o.gain + o.adc;
            adu_pixels(if adu > 65535.0 { 65535.0 } else { adu })
        })
        .collect();
    let smv_header = match &header {
        Some(h) => SmvHeader::copied(h.bytes.clone(), x, y),
        None => own_header(&o, x, y),
    };
    let bytes_per = if o.bits == 32 { 4 } else { 2 };
    writeln!(out, "writing {} as {pixels} {bytes_per}-byte integers", o.int_name)?;
    write_integer_image(&mut int_file, &smv_header, o.bits, noiseless.iter().copied())
        .map_err(|e| write_error("-intfile", e))?;
    if let Some(file) = pgm_file.as_mut() {
        writeln!(out, "writing {} as 1-byte integers", o.pgm_name)?;
        let bytes: Vec<u8> = noiseless.iter().map(|&(p16, _)| p16.min(255) as u8).collect();
        let pgm = Image::Pgm { fpixels: x, spixels: y, scale: 1.0, bytes: &bytes };
        image_writer::write(file, pgm).map_err(|e| write_error("-pgmfile", e))?;
    }
    let files = |noise| {
        let files = [("-intfile", Some(int_file)), ("-pgmfile", pgm_file), ("-noisefile", noise)];
        crate::output_files::commit(files.into_iter().filter_map(|(f, p)| Some((f, p?))).collect())
    };
    let Some(mut noise) = noise_file.take() else { return files(None) };

    let response = Response {
        gain: o.gain,
        adc_offset: o.adc,
        readout_noise: o.readout,
        flicker_noise: o.flicker,
        calibration_noise: o.calibration,
        psf,
        bits: if o.bits == 32 { Bits::U32 } else { Bits::U16 },
    };
    let (noisy, smv_header) = match o.noise_rng {
        NoiseStream::C => {
            let mut seeds = SharedSeeds::new(o.seed, o.calib_seed);
            (noisy_image(&photons, x, y, &response, &mut seeds), smv_header)
        }
        NoiseStream::Parallel => {
            let stream = PixelStream { seed: o.seed.wrapping_neg(), first_pixel: 0 };
            let tiles = PanelLayout::whole(x, y);
            let calibration = o.calib_seed.wrapping_neg();
            let noisy = noisy_image_parallel(&photons, &tiles, &response, stream, calibration);
            // (a header copied with -header is the reference's: left as it is)
            (noisy, parallel_noise_header(smv_header, o.seed.wrapping_neg()))
        }
    };
    if let (Some(before), Some(applied)) = (noisy.photons_before_psf, noisy.psf.first()) {
        writeln!(out, "{} photons on noise image before PSF", f(before, 0))?;
        writeln!(out, "  applying PSF width = {} um", g(o.psf_fwhm_m as f64 * 1e6))?;
        report_psf(applied, out)?;
    }
    writeln!(
        out,
        "{} photons on noise image ({} overloads)",
        f(noisy.photons, 0),
        noisy.overloads
    )?;
    writeln!(out, "writing {} as {bytes_per}-byte integers", o.noise_name)?;
    let pixels = noisy.pixels16.into_iter().zip(noisy.pixels32);
    write_integer_image(&mut noise, &smv_header, o.bits, pixels)
        .map_err(|e| write_error("-noisefile", e))?;
    files(Some(noise))
}

/// Refuses a run needing `bytes` when this process may not allocate them.
fn fits_in_memory(bytes: u128, what: impl FnOnce() -> String) -> Result<()> {
    if bytes > nanobragg_core::memory::budget_for(bytes) {
        let gib = bytes as f64 / (1u64 << 30) as f64;
        bail!("{} needs {gib:.1} GiB, more memory than this process can allocate", what());
    }
    Ok(())
}

/// `n` zeros, or an error naming the image size where memory runs out.
fn zeros(n: usize, x: usize, y: usize) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .ok()
        .with_context(|| format!("a {x} x {y} pixel image does not fit in memory"))?;
    v.resize(n, 0.0);
    Ok(v)
}

/// The options block of the console output.
fn report_options(o: &Options, x: usize, y: usize, out: &mut impl Write) -> Result<()> {
    writeln!(
        out,
        "  distance={} detsize={}x{}  pixel={} meters ({x}x{y} pixels)",
        g(o.distance_m),
        g(o.detsize_m[0]),
        g(o.detsize_m[1]),
        g(o.pixel_m)
    )?;
    writeln!(out, "  Xbeam={} Ybeam={}", g(o.xbeam_m), g(o.ybeam_m))?;
    let fwhm_um = g(o.psf_fwhm_m as f64 * 1e6);
    match o.psf {
        Some(PsfShape::Gauss) => write!(out, "  Gaussian PSF fwhm = {fwhm_um} um ")?,
        Some(PsfShape::Fiber) => write!(out, "  fiber PSF fwhm = {fwhm_um} um ")?,
        None => {}
    }
    if o.psf.is_some() {
        if o.psf_radius == 0 {
            writeln!(out, "  with automatic rendering radius")?;
        }
        writeln!(out, "  with rendering radius: {}", o.psf_radius)?;
    }
    writeln!(out, "  seed: {}", o.seed)?;
    writeln!(out, "  calibration noise seed: {}", o.calib_seed)?;
    writeln!(out, "  calibration_noise = {} %", g(o.calibration * 100.0))?;
    writeln!(out, "  input file scale = {}", g(o.scale))?;
    writeln!(out, "  readout_noise = {} ADU", g(o.readout))?;
    writeln!(out, "  flicker_noise = {} %", g(o.flicker * 100.0))?;
    writeln!(out, "  quantum_gain = {} ADU/photon", g(o.gain))?;
    writeln!(out, "  adc_offset = {} ADU", g(o.adc))?;
    writeln!(out)?;
    Ok(())
}

/// Writes an SMV image: `header` then the 16- or 32-bit pixels (of each
/// pair, the one `bits` says).
fn write_integer_image(
    file: &mut Pending,
    header: &SmvHeader,
    bits: i32,
    pixels: impl Iterator<Item = (u16, u32)>,
) -> Result<(), nanobragg_io::IoError> {
    if bits == 32 {
        let p32: Vec<u32> = pixels.map(|(_, p)| p).collect();
        image_writer::write(file, Image::Smv(header, SmvPixels::U32(&p32)))
    } else {
        let p16: Vec<u16> = pixels.map(|(p, _)| p).collect();
        image_writer::write(file, Image::Smv(header, SmvPixels::U16(&p16)))
    }
}
