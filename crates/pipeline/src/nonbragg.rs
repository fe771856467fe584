//! `nanobragg nonbragg`: nonBragg.c's command line, files and console output.
//!
//! Renders the diffuse background of an amorphous sample (water, air, ice,
//! oil) from a `.stol` table (see [`nanobragg_core::amorphous`]) into a float
//! image, an integer SMV image, a PGM preview and a Poisson noise image; with
//! `-img` it also turns a measured SMV image back into F per sin θ/λ bin. The
//! arguments are read as the reference reads them: each one is tested against
//! every option name as a substring, values are taken from the following
//! arguments without consuming them. docs/compat.md lists what differs.

use std::io::Write;
use std::path::Path;

use crate::image_headers::parallel_noise_header;
use crate::image_outputs::ParallelNoiseFile;
use crate::output_files::{open_output, write_error};
use anyhow::{bail, Context, Result};
use nanobragg_core::amorphous::{
    place_detector, render_amorphous, step_grid, AmorphousDetector, AmorphousSample,
    AmorphousSource, Background, DetectorPlacement, PixelTrace, PlacedDetector, StolTable,
    AVOGADRO, R_E_SQR,
};
use nanobragg_core::noise::noise_image;
use nanobragg_core::noise_stream::{NoiseStream, PixelStream};
use nanobragg_core::render::fast_amorphous_image;
use nanobragg_core::rng::NoiseRng;
use nanobragg_core::stats::{roi_columns, roi_rows};
use nanobragg_core::vec3::{cross, dot, rotate_axis, unitize, V3};
use nanobragg_io::atomic::Pending;
use nanobragg_io::cfmt::{f, g, g_prec, g_width};
use nanobragg_io::image_writer::{self, Image, SmvHeader, SmvPixels};
use nanobragg_io::smv::{atof, atoi, read_smv};

/// Degrees per radian, as the reference forms it.
const RTD: f64 = 180.0 * std::f64::consts::FRAC_1_PI;

/// Which detector point stays put when the detector is rotated.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Pivot {
    Sample,
    Beam,
}

/// Everything the command line sets, with nonBragg.c's defaults (SI units;
/// NaN or -1 mean "not given" where the reference uses them so).
#[derive(Debug, Clone)]
struct Options {
    stol_name: Option<String>,
    stol_mult: f64,
    img_name: Option<String>,
    stolout_name: String,
    source_name: Option<String>,
    float_name: String,
    int_name: String,
    pgm_name: String,
    noise_name: String,
    lambda0: f64,
    dispersion: f64,
    dispstep: f64,
    dispsteps: i32,
    hdiv: [f64; 2],
    vdiv: [f64; 2],
    hdivsteps: i32,
    vdivsteps: i32,
    round_div: bool,
    source_distance: f64,
    beam: V3<f64>,
    fdet: V3<f64>,
    sdet: V3<f64>,
    polar_vector: V3<f64>,
    twotheta_axis: V3<f64>,
    fluence: f64,
    flux: f64,
    exposure: f64,
    beamsize: f64,
    sample: V3<f64>,
    density: f64,
    molecular_weight: f64,
    molecules: f64,
    pixel: f64,
    fpixels: i32,
    spixels: i32,
    distance: f64,
    detsize: [f64; 2],
    rot: V3<f64>,
    pivot: Pivot,
    twotheta: f64,
    curved: bool,
    point_pixel: bool,
    fmap: bool,
    xbeam: f64,
    ybeam: f64,
    xclose: f64,
    yclose: f64,
    close_distance: f64,
    orgx: f64,
    orgy: f64,
    gain: f64,
    adc: f64,
    kahn: f64,
    nopolar: bool,
    roi: [i32; 4],
    oversample: i32,
    phi0: f64,
    phistep: f64,
    osc: f64,
    phisteps: i32,
    int_scale: f64,
    pgm_scale: f64,
    seed: i64,
    /// `-noise_rng`: the stream the noise image draws from (the name as
    /// given; checked before the work).
    noise_rng: String,
    noise: bool,
    printout: bool,
    printout_pixel: [i32; 2],
    progress: bool,
    ignore: Vec<u16>,
}

impl Default for Options {
    fn default() -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let nan = f64::NAN;
        Options {
            stol_name: None,
            stol_mult: 1e10,
            img_name: None,
            stolout_name: "output.stol".into(),
            source_name: None,
            float_name: "floatimage.bin".into(),
            int_name: "intimage.img".into(),
            pgm_name: "image.pgm".into(),
            noise_name: "noiseimage.img".into(),
            lambda0: 1e-10,
            dispersion: 0.0,
            dispstep: -1.0,
            dispsteps: -1,
            hdiv: [-1.0, -1.0],
            vdiv: [-1.0, -1.0],
            hdivsteps: -1,
            vdivsteps: -1,
            round_div: true,
            source_distance: 10.0,
            beam: [1.0, 0.0, 0.0],
            fdet: [0.0, 0.0, 1.0],
            sdet: [0.0, -1.0, 0.0],
            polar_vector: [0.0, 0.0, 1.0],
            twotheta_axis: [0.0, 1.0, 0.0],
            fluence: 125932015286227086360700780544.0,
            flux: 0.0,
            exposure: 1.0,
            beamsize: 1e-4,
            sample: [1e-4; 3],
            density: 1e6,
            molecular_weight: 18.0,
            molecules: 0.0,
            pixel: 1e-4,
            fpixels: 0,
            spixels: 0,
            distance: 0.1,
            detsize: [0.1024, 0.1024],
            rot: [0.0; 3],
            pivot: Pivot::Beam,
            twotheta: 0.0,
            curved: false,
            point_pixel: false,
            fmap: false,
            xbeam: nan,
            ybeam: nan,
            xclose: nan,
            yclose: nan,
            close_distance: nan,
            orgx: nan,
            orgy: nan,
            gain: 1.0,
            adc: 40.0,
            kahn: 0.0,
            nopolar: false,
            roi: [-1; 4],
            oversample: -1,
            phi0: 0.0,
            phistep: -1.0,
            osc: -1.0,
            phisteps: -1,
            int_scale: 0.0,
            pgm_scale: 0.0,
            seed: -now,
            noise_rng: "c".into(),
            noise: true,
            printout: false,
            printout_pixel: [-1, 0],
            progress: true,
            ignore: Vec::new(),
        }
    }
}

/// How an option name is matched against an argument.
#[derive(Clone, Copy)]
enum Match {
    /// The name occurs anywhere in the argument.
    Sub(&'static str),
    /// The name occurs and the argument is exactly as long as the name.
    Exact(&'static str),
    /// The name occurs and the argument is longer than `n` bytes.
    Longer(&'static str, usize),
}

impl Match {
    fn hits(self, arg: &str) -> bool {
        match self {
            Match::Sub(n) => arg.contains(n),
            Match::Exact(n) => arg.contains(n) && arg.len() == n.len(),
            Match::Longer(n, len) => arg.contains(n) && arg.len() > len,
        }
    }
}

/// What an option does with its values.
#[derive(Clone, Copy)]
enum Set {
    NoiseRng,
    SampleSize,
    SampleX,
    SampleY,
    SampleZ,
    Density,
    Molecules,
    MolecularWeight,
    Xbeam,
    Ybeam,
    Xclose,
    Yclose,
    Orgx,
    Orgy,
    Pivot,
    Fdet,
    Sdet,
    Beam,
    Polar,
    TwothetaAxis,
    /// `-odet_vector`, `-spindle_axis`, `-pix0_vector`: read and never used.
    Unused,
    Distance,
    CloseDistance,
    SourceDistance,
    Twotheta,
    RotX,
    RotY,
    RotZ,
    Detsize,
    DetsizeX,
    DetsizeY,
    Detpixels,
    DetpixelsF,
    DetpixelsS,
    Curved,
    Pixel,
    PointPixel,
    Fmap,
    Kahn,
    NoPolar,
    Oversample,
    Roi,
    Lambda,
    Energy,
    Fluence,
    Flux,
    Exposure,
    Beamsize,
    Dispersion,
    Dispsteps,
    Divergence,
    Hdivrange,
    Vdivrange,
    Hdivstep,
    Hdivsteps,
    Vdivstep,
    Vdivsteps,
    Divsteps,
    RoundDiv,
    SquareDiv,
    Adc,
    Gain,
    Phi,
    Osc,
    Phistep,
    Phisteps,
    Img,
    Ignore,
    Stolout,
    Stol(f64),
    SourceFile,
    Float,
    Int,
    Pgm,
    Noise,
    NoNoise,
    /// `-nopgm`, `-noreject`, `-coherent`: accepted, no effect.
    NoEffect,
    Scale,
    PgmScale,
    Printout,
    NoProgress,
    Progress,
    PrintoutPixel,
    Seed,
}

/// One option: the names that select it, how many values follow it, and
/// whether the reference demands a following argument even without a value
/// (`-curved_det`).
struct Opt {
    names: &'static [Match],
    values: usize,
    needs_next: bool,
    set: Set,
}

const fn opt(names: &'static [Match], values: usize, set: Set) -> Opt {
    Opt { names, values, needs_next: values > 0, set }
}

use Match::{Exact, Longer, Sub};

/// The options in the order the reference tests them: every match applies,
/// so the later of two options hit by one argument wins.
const OPTIONS: &[Opt] = &[
    opt(&[Sub("-samplesize"), Sub("-sample_size")], 1, Set::SampleSize),
    opt(&[Sub("-sample_thick"), Sub("-sample_x"), Sub("-thick")], 1, Set::SampleX),
    opt(&[Sub("-sample_width"), Sub("-sample_y"), Sub("-width")], 1, Set::SampleY),
    opt(&[Sub("-sample_heigh"), Sub("-sample_z"), Sub("-heigh")], 1, Set::SampleZ),
    opt(&[Sub("-density"), Sub("-sample_den")], 1, Set::Density),
    opt(&[Sub("-molecules"), Sub("-sample_molecules")], 1, Set::Molecules),
    opt(&[Exact("-MW"), Sub("-molecular")], 1, Set::MolecularWeight),
    opt(&[Sub("-Xbeam")], 1, Set::Xbeam),
    opt(&[Sub("-Ybeam")], 1, Set::Ybeam),
    opt(&[Sub("-Xclose")], 1, Set::Xclose),
    opt(&[Sub("-Yclose")], 1, Set::Yclose),
    opt(&[Sub("-ORGX")], 1, Set::Orgx),
    opt(&[Sub("-ORGY")], 1, Set::Orgy),
    opt(&[Sub("-pivot")], 1, Set::Pivot),
    opt(&[Sub("-fdet_vector")], 3, Set::Fdet),
    opt(&[Sub("-sdet_vector")], 3, Set::Sdet),
    opt(&[Sub("-odet_vector")], 3, Set::Unused),
    opt(&[Sub("-beam_vector")], 3, Set::Beam),
    opt(&[Sub("-polar_vector")], 3, Set::Polar),
    opt(&[Sub("-spindle_axis")], 3, Set::Unused),
    opt(&[Sub("-twotheta_axis")], 3, Set::TwothetaAxis),
    opt(&[Sub("-pix0_vector")], 3, Set::Unused),
    opt(&[Sub("-distance")], 1, Set::Distance),
    opt(&[Sub("-close_distance")], 1, Set::CloseDistance),
    opt(&[Sub("-source_distance")], 1, Set::SourceDistance),
    opt(&[Sub("-twotheta")], 1, Set::Twotheta),
    opt(&[Sub("-detector_rotx")], 1, Set::RotX),
    opt(&[Sub("-detector_roty")], 1, Set::RotY),
    opt(&[Sub("-detector_rotz")], 1, Set::RotZ),
    opt(&[Exact("-detsize")], 1, Set::Detsize),
    opt(&[Sub("-detsize_x")], 1, Set::DetsizeX),
    opt(&[Sub("-detsize_y")], 1, Set::DetsizeY),
    opt(&[Exact("-detpixels")], 1, Set::Detpixels),
    opt(&[Sub("-detpixels_f"), Sub("-detpixels_x")], 1, Set::DetpixelsF),
    opt(&[Sub("-detpixels_s"), Sub("-detpixels_y")], 1, Set::DetpixelsS),
    Opt { names: &[Sub("-curved_det")], values: 0, needs_next: true, set: Set::Curved },
    opt(&[Sub("-pixel")], 1, Set::Pixel),
    opt(&[Sub("-point_pixel")], 0, Set::PointPixel),
    opt(&[Sub("-Fmap")], 0, Set::Fmap),
    opt(&[Exact("-polar")], 1, Set::Kahn),
    opt(&[Sub("-nopolar")], 0, Set::NoPolar),
    opt(&[Sub("-oversample")], 1, Set::Oversample),
    opt(&[Sub("-roi")], 4, Set::Roi),
    opt(&[Sub("-lambda"), Sub("-wave")], 1, Set::Lambda),
    opt(&[Sub("-energy")], 1, Set::Energy),
    opt(&[Sub("-fluence")], 1, Set::Fluence),
    opt(&[Sub("-flux")], 1, Set::Flux),
    opt(&[Sub("-exposure")], 1, Set::Exposure),
    opt(&[Sub("-beamsize")], 1, Set::Beamsize),
    opt(&[Sub("-dispersion")], 1, Set::Dispersion),
    opt(&[Sub("-dispsteps")], 1, Set::Dispsteps),
    opt(&[Sub("-divergence")], 1, Set::Divergence),
    opt(&[Sub("-hdivrange")], 1, Set::Hdivrange),
    opt(&[Sub("-vdivrange")], 1, Set::Vdivrange),
    opt(&[Exact("-hdivstep")], 1, Set::Hdivstep),
    opt(&[Sub("-hdivsteps")], 1, Set::Hdivsteps),
    opt(&[Exact("-vdivstep")], 1, Set::Vdivstep),
    opt(&[Sub("-vdivsteps")], 1, Set::Vdivsteps),
    opt(&[Sub("-divsteps")], 1, Set::Divsteps),
    opt(&[Sub("-round_div")], 0, Set::RoundDiv),
    opt(&[Sub("-square_div")], 0, Set::SquareDiv),
    opt(&[Sub("-adc")], 1, Set::Adc),
    opt(&[Sub("-gain")], 1, Set::Gain),
    opt(&[Exact("-phi")], 1, Set::Phi),
    opt(&[Sub("-osc")], 1, Set::Osc),
    opt(&[Exact("-phistep")], 1, Set::Phistep),
    opt(&[Sub("-phisteps")], 1, Set::Phisteps),
    opt(&[Sub("-img")], 1, Set::Img),
    opt(&[Sub("-ignore")], 1, Set::Ignore),
    opt(&[Longer("-stolout", 7)], 1, Set::Stolout),
    opt(&[Exact("-stol")], 1, Set::Stol(1e10)),
    opt(&[Exact("-4stol")], 1, Set::Stol(1e10 / 4.0)),
    opt(&[Exact("-Q")], 1, Set::Stol(1e10 / std::f64::consts::PI / 4.0)),
    opt(&[Sub("-sourcefile")], 1, Set::SourceFile),
    opt(&[Sub("-floatfile"), Sub("-floatimage")], 1, Set::Float),
    opt(&[Sub("-intfile"), Sub("-intimage")], 1, Set::Int),
    opt(&[Sub("-pgmfile"), Sub("-pgmimage")], 1, Set::Pgm),
    opt(&[Sub("-noisefile"), Sub("-noiseimage")], 1, Set::Noise),
    opt(&[Sub("-nonoise")], 0, Set::NoNoise),
    opt(&[Sub("-nopgm"), Sub("-noreject"), Sub("-coherent")], 0, Set::NoEffect),
    opt(&[Sub("-scale")], 1, Set::Scale),
    opt(&[Sub("-pgmscale")], 1, Set::PgmScale),
    opt(&[Sub("-printout")], 0, Set::Printout),
    opt(&[Sub("-noprogress")], 0, Set::NoProgress),
    opt(&[Sub("-progress")], 0, Set::Progress),
    opt(&[Sub("-printout_pixel")], 2, Set::PrintoutPixel),
    opt(&[Sub("-seed")], 1, Set::Seed),
    opt(&[Exact("-noise_rng")], 1, Set::NoiseRng),
];

/// The usage text the reference prints when no table is given.
const USAGE: &str = "usage: nonBragg -stol water.stol
options:
\t-stol filename.stol\ttext file containing sin(theta)/lambda and F for one molecule
\t-thickness\tthickness of the sample in mm
\t-samplesize\tlinear dimension of the (cube shaped) sample in mm
\t-density\tdensity of the sample in g/cm^3
\t-MW\tmolecular weight of the sample material in g/mol
\t-hdivrange\thorizontal angular spread of source points in mrad
\t-vdivrange\tvertical angular spread of source points in mrad
\t-hdivstep\tnumber of source points in the horizontal
\t-vdivstep\tnumber of source points in the vertical
\t-distance\tdistance from origin to detector center in mm
\t-detsize\tdetector size in mm
\t-pixel\tdetector pixel size in mm
\t-oversample\tnumber of sub-pixels per pixel
\t-lambda\tincident x-ray wavelength in Angstrom
\t-dispersion\tspectral dispersion: delta-lambda/lambda in percent
\t-dispsteps\tnumber of wavelengths in above range
\t-fluence\tintegrated beam intensity in photons/m^2
\t-flux\t beam intensity in photons/s
\t-exposure\t exposure time in s
\t-beamsize\t linear dimension of the (square) beam profile in mm
\t-sourcefile filename.txt\ttext file containing source positions in mm
\t-floatfile\tname of binary output file (4-byte floats)
\t-intfile\tname of smv-formatted output file (arbitrary scale)
\t-pgmfile\tname of pgm-formatted output file (arbitrary scale)
\t-noisefile\tname of smv-formatted output file (with Poisson noise)
\t-noise_rng\tc (the default: the C program's stream) or parallel
\t-Xbeam\timage X coordinate of direct-beam spot (mm)
\t-Ybeam\timage Y coordinate of direct-beam spot (mm)
\t-printout\tprint pixel values out to the screen
\t-noprogress\tturn off the progress meter
";

/// Reads the arguments as nonBragg.c does (after the `-img` defaults).
fn parse(args: &[String], o: &mut Options) -> Result<()> {
    for (i, arg) in args.iter().enumerate() {
        if !arg.starts_with('-') {
            continue;
        }
        for opt in OPTIONS {
            if !opt.names.iter().any(|m| m.hits(arg)) {
                continue;
            }
            let wanted = if opt.needs_next { opt.values.max(1) } else { 0 };
            if i + wanted >= args.len() {
                continue;
            }
            let v: Vec<&str> = args[i + 1..i + 1 + opt.values].iter().map(String::as_str).collect();
            apply(o, opt.set, &v);
        }
    }
    Ok(())
}

/// Applies one option's values with C `atof`/`atoi` semantics.
fn apply(o: &mut Options, set: Set, v: &[&str]) {
    let x = |k: usize| atof(v[k]);
    let mm = |k: usize| atof(v[k]) / 1000.0;
    let n = |k: usize| atoi(v[k]);
    let vec3 = || [x(0), x(1), x(2)];
    match set {
        Set::SampleSize => o.sample = [mm(0); 3],
        Set::SampleX => o.sample[0] = mm(0),
        Set::SampleY => o.sample[1] = mm(0),
        Set::SampleZ => o.sample[2] = mm(0),
        Set::Density => o.density = x(0) * 1e6,
        Set::Molecules => o.molecules = x(0),
        Set::MolecularWeight => o.molecular_weight = x(0),
        Set::Xbeam => (o.xbeam, o.pivot) = (mm(0), Pivot::Beam),
        Set::Ybeam => (o.ybeam, o.pivot) = (mm(0), Pivot::Beam),
        Set::Xclose => (o.xclose, o.pivot) = (mm(0), Pivot::Sample),
        Set::Yclose => (o.yclose, o.pivot) = (mm(0), Pivot::Sample),
        Set::Orgx => (o.orgx, o.pivot) = (x(0), Pivot::Sample),
        Set::Orgy => (o.orgy, o.pivot) = (x(0), Pivot::Sample),
        Set::Pivot => {
            if v[0].contains("sample") {
                o.pivot = Pivot::Sample;
            }
            if v[0].contains("beam") {
                o.pivot = Pivot::Beam;
            }
        }
        Set::Fdet => o.fdet = vec3(),
        Set::Sdet => o.sdet = vec3(),
        Set::Beam => o.beam = vec3(),
        Set::Polar => o.polar_vector = vec3(),
        Set::TwothetaAxis => o.twotheta_axis = vec3(),
        Set::Unused | Set::NoEffect => {}
        Set::Distance => (o.distance, o.pivot) = (mm(0), Pivot::Beam),
        Set::CloseDistance => (o.close_distance, o.pivot) = (mm(0), Pivot::Sample),
        Set::SourceDistance => o.source_distance = mm(0),
        Set::Twotheta => (o.twotheta, o.pivot) = (x(0) / RTD, Pivot::Sample),
        Set::RotX => o.rot[0] = x(0) / RTD,
        Set::RotY => o.rot[1] = x(0) / RTD,
        Set::RotZ => o.rot[2] = x(0) / RTD,
        Set::Detsize => o.detsize = [mm(0); 2],
        Set::DetsizeX => o.detsize[0] = mm(0),
        Set::DetsizeY => o.detsize[1] = mm(0),
        Set::Detpixels => (o.fpixels, o.spixels) = (n(0), n(0)),
        Set::DetpixelsF => o.fpixels = n(0),
        Set::DetpixelsS => o.spixels = n(0),
        Set::Curved => o.curved = true,
        Set::Pixel => o.pixel = mm(0),
        Set::PointPixel => o.point_pixel = true,
        Set::Fmap => o.fmap = true,
        Set::Kahn => (o.kahn, o.nopolar) = (x(0), false),
        Set::NoPolar => o.nopolar = true,
        Set::Oversample => o.oversample = n(0),
        Set::Roi => o.roi = [n(0), n(1), n(2), n(3)],
        Set::Lambda => o.lambda0 = x(0) / 1e10,
        Set::Energy => o.lambda0 = (12398.42 / x(0)) / 1e10,
        Set::Fluence => o.fluence = x(0),
        Set::Flux => o.flux = x(0),
        Set::Exposure => o.exposure = x(0),
        Set::Beamsize => o.beamsize = mm(0),
        Set::Dispersion => o.dispersion = x(0) / 100.0,
        Set::Dispsteps => o.dispsteps = n(0),
        Set::Divergence => (o.hdiv[0], o.vdiv[0]) = (mm(0), mm(0)),
        Set::Hdivrange => o.hdiv[0] = mm(0),
        Set::Vdivrange => o.vdiv[0] = mm(0),
        Set::Hdivstep => o.hdiv[1] = mm(0),
        Set::Hdivsteps => o.hdivsteps = n(0),
        Set::Vdivstep => o.vdiv[1] = mm(0),
        Set::Vdivsteps => o.vdivsteps = n(0),
        Set::Divsteps => (o.hdivsteps, o.vdivsteps) = (n(0), n(0)),
        Set::RoundDiv => o.round_div = true,
        Set::SquareDiv => o.round_div = false,
        Set::Adc => o.adc = x(0),
        Set::Gain => o.gain = x(0),
        Set::Phi => o.phi0 = x(0) / RTD,
        Set::Osc => o.osc = x(0) / RTD,
        Set::Phistep => o.phistep = x(0) / RTD,
        Set::Phisteps => o.phisteps = n(0),
        Set::Img => o.img_name = Some(v[0].to_string()),
        // the reference stores the value in an unsigned short
        Set::Ignore => o.ignore.push(x(0) as i32 as u16),
        Set::Stolout => o.stolout_name = v[0].to_string(),
        Set::Stol(mult) => (o.stol_name, o.stol_mult) = (Some(v[0].to_string()), mult),
        Set::SourceFile => o.source_name = Some(v[0].to_string()),
        Set::Float => o.float_name = v[0].to_string(),
        Set::Int => o.int_name = v[0].to_string(),
        Set::Pgm => o.pgm_name = v[0].to_string(),
        Set::Noise => (o.noise_name, o.noise) = (v[0].to_string(), true),
        Set::NoNoise => o.noise = false,
        Set::Scale => o.int_scale = x(0),
        Set::PgmScale => o.pgm_scale = x(0),
        Set::Printout => o.printout = true,
        Set::NoProgress => o.progress = false,
        Set::Progress => o.progress = true,
        Set::PrintoutPixel => o.printout_pixel = [n(0), n(1)],
        Set::Seed => o.seed = -(atoi(v[0]) as i64),
        Set::NoiseRng => o.noise_rng = v[0].to_string(),
    }
}

/// The image given with `-img`: its pixels, and the defaults its header sets.
struct InputImage {
    pixels: Vec<u16>,
}

/// Reads `-img` and takes its header's geometry as defaults (flags given on
/// the command line override them whatever their order).
fn read_input_image(name: &str, o: &mut Options, out: &mut impl Write) -> Result<InputImage> {
    let img = read_smv(Path::new(name)).with_context(|| format!("-img {name}"))?;
    if img.width > 1 << 20 || img.height > 1 << 20 {
        bail!("-img {name}: SIZE1/SIZE2 {} x {} is too large", img.width, img.height);
    }
    let h = img.geometry();
    o.fpixels = h.width as i32;
    o.spixels = h.height as i32;
    if let Some(v) = h.pixel_size_mm {
        o.pixel = v / 1000.0;
    }
    o.detsize = [o.pixel * h.width as f64, o.pixel * h.height as f64];
    if let Some(v) = h.distance_mm {
        o.distance = v / 1000.0;
    }
    if let Some(v) = h.close_distance_mm {
        o.close_distance = v / 1000.0;
    }
    if let Some(v) = h.wavelength_a {
        o.lambda0 = v / 1e10;
    }
    if let Some(v) = h.beam_center_x_mm {
        o.xbeam = v / 1000.0;
    }
    if let Some(v) = h.beam_center_y_mm {
        o.ybeam = o.detsize[1] - v / 1000.0;
    }
    if let Some(v) = h.orgx_px {
        o.orgx = v;
    }
    if let Some(v) = h.orgy_px {
        o.orgy = v;
    }
    if let Some(v) = h.phi_deg {
        o.phi0 = v / RTD;
    }
    if let Some(v) = h.osc_range_deg {
        o.osc = v / RTD;
    }
    writeln!(out, "reading {name}")?;
    Ok(InputImage { pixels: img.data })
}

/// The oscillation range written to the header (radians), from `-osc`,
/// `-phistep` and `-phisteps` as the reference settles them.
fn header_osc(o: &Options) -> f64 {
    let (osc, step, steps) = (o.osc, o.phistep, o.phisteps);
    if steps < 0 {
        if osc < 0.0 {
            return if step <= 0.0 { 0.0 } else { step };
        }
        osc
    } else if osc < 0.0 {
        if step <= 0.0 {
            1.0 / RTD
        } else {
            step
        }
    } else {
        osc
    }
}

/// Checks values no run can use; the message names the flag.
fn validate(o: &Options) -> Result<()> {
    let positive = |v: f64, what: &str| -> Result<()> {
        if !(v > 0.0 && v.is_finite()) {
            bail!("{what}: {} is not allowed (a positive number)", g(v));
        }
        Ok(())
    };
    positive(o.pixel, "-pixel (mm)")?;
    positive(o.lambda0, "-lambda/-energy (wavelength)")?;
    positive(o.molecular_weight, "-MW")?;
    if o.fpixels < 0 || o.spixels < 0 {
        bail!("-detpixels: {} x {} pixels is not allowed", o.fpixels, o.spixels);
    }
    if o.sample.iter().any(|&s| !(s >= 0.0 && s.is_finite())) {
        bail!("-samplesize/-thickness/-width/-height: negative or non-finite sample size");
    }
    if o.source_distance == 0.0 && o.source_name.is_none() {
        bail!("-source_distance: 0 gives no beam direction");
    }
    if NoiseStream::parse(&o.noise_rng).is_none() {
        bail!("-noise_rng: '{}' is not a noise stream (c or parallel)", o.noise_rng);
    }
    if magnitude(o.beam) == 0.0 || magnitude(cross(o.fdet, o.sdet)) == 0.0 {
        bail!("-beam_vector/-fdet_vector/-sdet_vector: zero or parallel vectors give no geometry");
    }
    Ok(())
}

fn magnitude(v: V3<f64>) -> f64 {
    dot(v, v).sqrt()
}

/// Runs nonBragg with its command line (without the program name), printing
/// to `out`.
pub fn run(args: &[String], out: &mut impl Write) -> Result<()> {
    let mut o = Options::default();
    // `-img` is read first, so that its header only supplies defaults
    let img_name = args
        .iter()
        .enumerate()
        .filter(|(i, a)| a.starts_with('-') && a.contains("-img") && i + 1 < args.len())
        .map(|(i, _)| args[i + 1].clone())
        .next_back();
    let input = match &img_name {
        Some(name) => Some(read_input_image(name, &mut o, out)?),
        None => None,
    };
    parse(args, &mut o)?;
    writeln!(
        out,
        "nonBragg amorphous material diffraction simulator - James Holton and Ken Frankel 3-19-16"
    )?;
    let Some(stol_name) = o.stol_name.clone() else {
        write!(out, "{USAGE}")?;
        bail!("no amorphous-material table given (-stol FILE, -4stol FILE or -Q FILE)");
    };
    // read every input before anything is written or printed at length
    let rows = nanobragg_io::stol::read_stol(Path::new(&stol_name))
        .with_context(|| format!("-stol {stol_name}"))?;
    let mut table = StolTable::new(&rows, o.stol_mult)
        .with_context(|| format!("-stol {stol_name}: no F values"))?;
    let file_sources = match &o.source_name {
        Some(name) => Some(
            nanobragg_core::source::sourcefile::read_source_file(Path::new(name))
                .with_context(|| format!("-sourcefile {name}"))?,
        ),
        None => None,
    };
    validate(&o)?;

    if o.fpixels != 0 {
        o.detsize[0] = o.pixel * o.fpixels as f64;
    }
    if o.spixels != 0 {
        o.detsize[1] = o.pixel * o.spixels as f64;
    }
    let fp = (o.detsize[0] / o.pixel).ceil();
    let sp = (o.detsize[1] / o.pixel).ceil();
    if !(fp >= 1.0 && sp >= 1.0 && fp * sp <= (1u64 << 31) as f64) {
        bail!("-detpixels/-detsize/-pixel: {} x {} pixels is not a usable detector", g(fp), g(sp));
    }
    let (fpixels, spixels) = (fp as usize, sp as usize);
    if let Some(img) = &input {
        if img.pixels.len() != fpixels * spixels {
            bail!(
                "-img {}: {} pixels, but the detector has {fpixels} x {spixels} (flags changed its size)",
                img_name.as_deref().unwrap_or_default(),
                img.pixels.len()
            );
        }
    }
    let pixel = o.pixel;
    let xclose0 = if !o.orgx.is_nan() { o.orgx * pixel } else { o.xclose };
    let yclose0 = if !o.orgy.is_nan() { o.orgy * pixel } else { o.yclose };
    let xclose0 = if xclose0.is_nan() { (o.detsize[0] - pixel) / 2.0 } else { xclose0 };
    let yclose0 = if yclose0.is_nan() { (o.detsize[1] + pixel) / 2.0 } else { yclose0 };
    let xbeam0 = if o.xbeam.is_nan() { xclose0 } else { o.xbeam };
    let ybeam0 = if o.ybeam.is_nan() { yclose0 } else { o.ybeam };
    let roi = [
        if o.roi[0] < 0 { 0 } else { o.roi[0] },
        if o.roi[1] < 0 { fpixels as i32 } else { o.roi[1] },
        if o.roi[2] < 0 { 0 } else { o.roi[2] },
        if o.roi[3] < 0 { spixels as i32 } else { o.roi[3] },
    ];
    let progress_pixels = (roi[1] as i64 - roi[0] as i64 + 1) * (roi[3] as i64 - roi[2] as i64 + 1);
    if o.flux != 0.0 && o.exposure > 0.0 && o.beamsize >= 0.0 {
        o.fluence = o.flux * o.exposure / o.beamsize / o.beamsize;
    }
    if o.beamsize >= 0.0 {
        if o.beamsize < o.sample[1] {
            writeln!(
                out,
                "WARNING: clipping sample ({} m high) with beam ({} m)",
                g(o.sample[1]),
                g(o.beamsize)
            )?;
            o.sample[1] = o.beamsize;
        }
        if o.beamsize < o.sample[2] {
            writeln!(
                out,
                "WARNING: clipping sample ({} m wide) with beam ({} m)",
                g(o.sample[2]),
                g(o.beamsize)
            )?;
            o.sample[2] = o.beamsize;
        }
    }
    let volume = o.sample[0] * o.sample[1] * o.sample[2];
    if o.molecules != 0.0 {
        o.density = o.molecules / volume / AVOGADRO * o.molecular_weight;
    }
    let molecules = volume * o.density * AVOGADRO / o.molecular_weight;
    o.beam = unitize(o.beam).0;
    o.fdet = unitize(o.fdet).0;
    o.sdet = unitize(o.sdet).0;
    o.polar_vector = unitize(o.polar_vector).0;
    o.twotheta_axis = unitize(o.twotheta_axis).0;
    let vert = unitize(cross(o.beam, o.polar_vector)).0;
    let osc = header_osc(&o);
    let [mut hrange, mut hstep] = o.hdiv;
    let [mut vrange, mut vstep] = o.vdiv;
    let (mut hsteps, mut vsteps) = (o.hdivsteps, o.vdivsteps);
    (hrange, hstep, hsteps) = step_grid(hrange, hstep, hsteps);
    (vrange, vstep, vsteps) = step_grid(vrange, vstep, vsteps);
    let (mut disp, mut dstep, mut dsteps) = (o.dispersion, o.dispstep, o.dispsteps);
    (disp, dstep, dsteps) = step_grid(disp, dstep, dsteps);

    if !(o.fluence.is_finite() && o.fluence >= 0.0) {
        bail!(
            "-fluence/-flux/-exposure/-beamsize: a fluence of {} photons/m^2 is not allowed",
            g(o.fluence)
        );
    }
    if !(molecules.is_finite() && molecules >= 0.0) {
        bail!("-density/-molecules/-MW: {} molecules is not allowed", g(molecules));
    }
    let geo = place_detector(&DetectorPlacement {
        beam: o.beam,
        fdet: o.fdet,
        sdet: o.sdet,
        rot: o.rot,
        twotheta_axis: o.twotheta_axis,
        twotheta: o.twotheta,
        pivot_sample: o.pivot == Pivot::Sample,
        distance: o.distance,
        close_distance: o.close_distance,
        xclose: xclose0,
        yclose: yclose0,
        xbeam: xbeam0,
        ybeam: ybeam0,
    });
    if !(geo.close_distance.is_finite() && geo.close_distance != 0.0 && geo.distance.is_finite()) {
        bail!(
            "-distance/-close_distance: the detector plane passes through the sample (distance {} m)",
            g(geo.distance)
        );
    }
    // every output opened before the render: a name that cannot be written
    // is refused before any file changes
    let mut files = Files::open(&o, input.is_some())?;
    match o.pivot {
        Pivot::Sample => writeln!(out, "pivoting detector around sample")?,
        Pivot::Beam => writeln!(out, "pivoting detector around direct beam spot")?,
    }
    writeln!(out, "reading {stol_name}")?;

    // stays -1 with -sourcefile: the reference prints its unset counter
    let mut divsteps = -1;
    let sources: Vec<AmorphousSource> = match file_sources {
        Some(rows) => rows
            .iter()
            .map(|r| {
                let or = |v: f64, d: f64| if v.is_nan() { d } else { v };
                AmorphousSource {
                    position: [
                        or(r[0], -o.source_distance * o.beam[0]),
                        or(r[1], -o.source_distance * o.beam[1]),
                        or(r[2], -o.source_distance * o.beam[2]),
                    ],
                    weight: or(r[3], 1.0),
                    lambda: or(r[4], o.lambda0),
                }
            })
            .collect(),
        None => {
            let offsets = |steps: i32, step: f64, range: f64| {
                (0..steps).map(move |k| step * k as f64 - range / 2.0)
            };
            let kept = |h: f64, v: f64| {
                let test =
                    (h * h - hstep * hstep / 4.0 * (1 - hsteps % 2) as f64) / hrange / hrange
                        + (v * v - vstep * vstep / 4.0 * (1 - vsteps % 2) as f64) / vrange / vrange;
                !(o.round_div && test * 4.0 > 1.1)
            };
            divsteps = 0;
            for h in offsets(hsteps, hstep, hrange) {
                for v in offsets(vsteps, vstep, vrange) {
                    if kept(h, v) {
                        divsteps += 1;
                        writeln!(out, "divergence deviation: {} {}", g(h), g(v))?;
                    }
                }
            }
            let lambdas: Vec<f64> =
                (0..dsteps).map(|k| o.lambda0 * (1.0 + dstep * k as f64 - disp / 2.0)).collect();
            for (k, l) in lambdas.iter().enumerate() {
                writeln!(out, "lambda{k} = {}", g_prec(*l, 15))?;
            }
            let mut list = Vec::new();
            for h in offsets(hsteps, hstep, hrange) {
                for v in offsets(vsteps, vstep, vrange) {
                    if !kept(h, v) {
                        continue;
                    }
                    let start = o.beam.map(|b| -o.source_distance * b);
                    let position = rotate_axis(rotate_axis(start, o.polar_vector, v), vert, h);
                    for &lambda in &lambdas {
                        list.push(AmorphousSource { position, weight: 1.0, lambda });
                    }
                }
            }
            list
        }
    };
    writeln!(out, "  created a total of {} sources:", sources.len())?;
    for s in &sources {
        let [x, y, z] = s.position;
        writeln!(out, "{} {} {}   {} {}", g(x), g(y), g(z), g(s.weight), g(s.lambda))?;
    }
    if sources.is_empty() {
        bail!("no sources: the divergence and dispersion flags leave no beam direction");
    }
    let oversample = if o.oversample <= 0 { 1 } else { o.oversample as usize };
    let steps = (sources.len() * oversample * oversample) as f64;
    writeln!(
        out,
        "  {} initialized F points (will cubic-spline interpolate between them)",
        table.len()
    )?;
    writeln!(out, "  wave={} meters +/- {}% in {dsteps} steps", g(o.lambda0), g(disp * 100.0))?;
    if o.nopolar {
        writeln!(out, "  polarization effect disabled")?;
    } else {
        writeln!(out, "  Kahn polarization factor: {}", f(o.kahn, 6))?;
    }
    if o.curved {
        writeln!(out, "  curved detector: all pixels same distance from origin")?;
    }
    if o.point_pixel {
        writeln!(out, "  pixel obliquity effect disabled")?;
    }
    if o.fmap {
        writeln!(out, "  Fmap mode: plotting structure factor at every pixel")?;
    }
    writeln!(out, "  incident fluence: {} photons/m^2", g(o.fluence))?;
    writeln!(
        out,
        "  sample is {} m thick x {} m high x {} m wide, {} g/cm^3 and {} g/mol ({} molecules)",
        g(o.sample[0]),
        g(o.sample[1]),
        g(o.sample[2]),
        g(o.density / 1e6),
        g(o.molecular_weight),
        g(molecules)
    )?;
    writeln!(
        out,
        "  distance={} detsize={}x{}  pixel={} meters ({fpixels}x{spixels} pixels)",
        g(geo.distance),
        g(o.detsize[0]),
        g(o.detsize[1]),
        g(pixel)
    )?;
    writeln!(out, "  Xbeam={} Ybeam={}", g(geo.xbeam), g(geo.ybeam))?;
    let v3 = |v: V3<f64>| format!("{} {} {}", g(v[0]), g(v[1]), g(v[2]));
    writeln!(out, "  detector origin: {}", v3(geo.pix0))?;
    writeln!(out, "  DIRECTION_OF_DETECTOR_X-AXIS= {}", v3(geo.fdet))?;
    writeln!(out, "  DIRECTION_OF_DETECTOR_Y-AXIS= {}", v3(geo.sdet))?;
    writeln!(out, "  INCIDENT_BEAM_DIRECTION= {}", v3(o.beam))?;
    writeln!(out, "  POLARIZATION_PLANE_NORMAL= {}", v3(o.polar_vector))?;
    writeln!(out, "  roi: {} < x < {} && {} < y < {}", roi[0], roi[1], roi[2], roi[3])?;
    writeln!(out, "  hdivrange={} hdivstep={}  radians", g(hrange), g(hstep))?;
    writeln!(out, "  vdivrange={} vdivstep={}  radians", g(vrange), g(vstep))?;
    writeln!(out, "  {divsteps} divergence steps")?;
    writeln!(out, "  {} sources", sources.len())?;
    writeln!(out, "  {oversample} pixel oversample steps")?;
    if o.noise {
        writeln!(out, "\n  noise image paramters:")?;
        writeln!(out, "  seed: {}", o.seed)?;
    }

    let det = AmorphousDetector {
        fpixels,
        spixels,
        pixel_size: pixel,
        oversample,
        pix0: geo.pix0,
        fdet: geo.fdet,
        sdet: geo.sdet,
        beam: o.beam,
        distance: geo.distance,
        close_distance: geo.close_distance,
        curved: o.curved,
        point_pixel: o.point_pixel,
        roi: roi.map(i64::from),
        sensor: None,
    };
    let sample = AmorphousSample {
        kahn: o.kahn,
        nopolar: o.nopolar,
        polar_vector: o.polar_vector,
        fluence: o.fluence,
        molecules,
        fmap: o.fmap,
    };
    let last_weight = sources.last().map_or(0.0, |s| s.weight);
    let mut progress_pixel = 0i64;
    let mut traces: Vec<Option<PixelTrace>> =
        if input.is_some() { vec![None; fpixels * spixels] } else { Vec::new() };
    let mut console: std::io::Result<()> = Ok(());
    let mut report = |t: &PixelTrace, out: &mut dyn Write| -> std::io::Result<()> {
        if o.printout {
            let [pf, ps] = o.printout_pixel;
            if (t.fpixel as i64 == pf as i64 && t.spixel as i64 == ps as i64) || pf < 0 {
                let p = t.position;
                let twotheta = (p[1] * p[1] + p[2] * p[2]).sqrt().atan2(p[0]);
                let test = (twotheta / 2.0).sin() / (o.lambda0 * 1e10);
                writeln!(
                    out,
                    "{:>4} {:>4} : stol = {} or {}",
                    t.fpixel,
                    t.spixel,
                    g(t.stol),
                    g(test)
                )?;
                // the reference prints a variable it never sets here (0)
                writeln!(out, " F={}    I = {}", g(0.0), g(last_weight))?;
                writeln!(out, "I/steps {}", g_width(last_weight / steps, 15, 10))?;
                writeln!(out, "polar   {}", g_width(t.polar, 15, 10))?;
                writeln!(out, "omega   {}", g_width(t.omega, 15, 10))?;
                writeln!(out, "pixel   {}", g_width(t.value as f64, 15, 10))?;
            }
        } else {
            if o.progress && progress_pixels / 100 > 0 {
                let (p, n) = (progress_pixel, progress_pixels);
                if p % (n / 20) == 0 || ((10 * p < n || 10 * p > 9 * n) && p % (n / 100) == 0) {
                    writeln!(out, "{}% done", p * 100 / n)?;
                }
            }
            progress_pixel += 1;
        }
        Ok(())
    };
    // rows in parallel where nothing needs the pixels one by one in order
    // (a trace, -img's bins) and the table's order makes lookups independent
    let parallel = (!o.printout && input.is_none())
        .then(|| Background::new(det, sources.clone(), sample, table.clone()))
        .flatten();
    // the C-bit sum belongs to the drop-in's C stream; the parallel stream's
    // runs take the background's fast form (the stream is validated)
    let stream = NoiseStream::parse(&o.noise_rng).unwrap_or_default();
    let fast = stream == NoiseStream::Parallel;
    let image = match parallel {
        Some(bg) => {
            let image = fast.then(|| fast_amorphous_image(&bg)).flatten();
            let image = image.unwrap_or_else(|| bg.render());
            let [xmin, xmax, ymin, ymax] = det.roi;
            let pixel_trace = PixelTrace {
                fpixel: 0,
                spixel: 0,
                stol: 0.0,
                f: 0.0,
                polar: 0.0,
                omega: 0.0,
                position: [0.0; 3],
                nearest: 0,
                value: 0.0,
            };
            // the progress lines, as the pixels are counted
            if o.progress {
                for s in 0..spixels as i64 {
                    for f in 0..fpixels as i64 {
                        if f >= xmin && f <= xmax && s >= ymin && s <= ymax && console.is_ok() {
                            console = report(&pixel_trace, out);
                        }
                    }
                }
            }
            image
        }
        None => render_amorphous(&det, &sources, &sample, &mut table, |t| {
            if console.is_ok() {
                console = report(t, out);
            }
            if let Some(slot) = traces.get_mut(t.spixel * fpixels + t.fpixel) {
                *slot = Some(*t);
            }
        }),
    };
    console?;
    check_finite(&image.pixels, &o, &stol_name, &table, &sources)?;
    writeln!(out)?;
    writeln!(
        out,
        "solid angle subtended by detector = {} steradian ( {}% sphere)",
        g(image.omega_sum),
        g(100.0 * image.omega_sum / 4.0 / std::f64::consts::PI)
    )?;
    let float = &image.pixels;
    // the ROI's rows and, per row, its pixels (clamped to the image)
    let rows = roi_rows(roi.map(i64::from), spixels);
    let cols = roi_columns(roi.map(i64::from), fpixels);

    // statistics over the rendered pixels, in the reference's order
    let (mut sum, mut sumsqr, mut max_i, mut max_at, mut n) =
        (0.0f64, 0.0f64, 0.0f64, [0.0; 2], 0i64);
    for sp in rows.clone() {
        for (fp, &v) in cols.clone().zip(&float[sp * fpixels + cols.start..sp * fpixels + cols.end])
        {
            let v = v as f64;
            if v > max_i {
                max_i = v;
                // the reference reports the last sub-pixel's position
                let sub = pixel / oversample as f64;
                let last = (oversample - 1) as f64;
                max_at = [
                    sub * (fp as f64 * oversample as f64 + last) + sub / 2.0,
                    sub * (sp as f64 * oversample as f64 + last) + sub / 2.0,
                ];
            }
            sum += v;
            sumsqr += v * v;
        }
        n += cols.len() as i64;
    }

    let mut stolout: Option<Vec<u8>> = None;
    if let (Some(img), Some(_)) = (&input, &img_name) {
        let (text, last_count) =
            extract_bins(&o, img, &traces, &table, R_E_SQR, molecules, steps, out)?;
        n = last_count;
        stolout = Some(text);
    }
    if n <= 0 {
        n = 1;
    }
    let avg = sum / n as f64;
    if n <= 1 {
        n = 2;
    }
    let rms = (sumsqr / (n - 1) as f64).sqrt();
    // the reference's deviation loop reads each pixel's right-hand neighbour
    let mut sumsqr = 0.0;
    let mut m = 0i64;
    for sp in rows.clone() {
        for fp in cols.clone() {
            let v = float.get(sp * fpixels + fp + 1).copied().unwrap_or(0.0) as f64;
            sumsqr += (v - avg) * (v - avg);
        }
        m += cols.len() as i64;
    }
    let m = m.max(2);
    let rmsd = (sumsqr / (m - 1) as f64).sqrt();

    if let (Some(text), Some(file)) = (stolout, files.stolout.as_mut()) {
        file.write(|w| w.write_all(&text)).map_err(|e| write_error("-stolout", e))?;
    }
    writeln!(out, "writing {} as {} 4-byte floats", o.float_name, fpixels * spixels)?;
    (image_writer::write(&mut files.float, Image::Float(float)))
        .map_err(|e| write_error("-floatfile", e))?;
    writeln!(out, "max_I = {}  at {} {}", g(max_i), g(max_at[0]), g(max_at[1]))?;
    writeln!(out, "mean= {} rms= {} rmsd= {}", g(avg), g(rms), g(rmsd))?;
    let int_scale = if o.int_scale > 0.0 {
        o.int_scale
    } else if max_i > 0.0 {
        55000.0 / max_i
    } else {
        1.0
    };
    writeln!(out, "intfile_scale = {}", g(int_scale))?;
    let mut ints = vec![0u16; fpixels * spixels];
    for sp in rows.clone() {
        let row = sp * fpixels + cols.start..sp * fpixels + cols.end;
        for (i, &v) in ints[row.clone()].iter_mut().zip(&float[row]) {
            let t = (v as f64 * int_scale + o.adc).clamp(0.0, 65535.0);
            // the reference's floorf(t + 0.5): a truncation, as t ≥ 0 (or NaN: 0)
            *i = ((t + 0.5) as f32) as u16;
        }
    }
    let header = smv_header(&o, &geo, fpixels, spixels, osc);
    writeln!(out, "writing {} as 2-byte integers", o.int_name)?;
    (image_writer::write(&mut files.int, Image::Smv(&header, SmvPixels::U16(&ints))))
        .map_err(|e| write_error("-intfile", e))?;

    let pgm_scale = if o.pgm_scale > 0.0 {
        o.pgm_scale
    } else if rmsd > 0.0 {
        250.0 / (5.0 * rmsd)
    } else {
        int_scale
    };
    writeln!(out, "pgm_scale = {}", g(pgm_scale))?;
    let mut pgm = vec![0u8; fpixels * spixels];
    for sp in rows.clone() {
        let row = sp * fpixels + cols.start..sp * fpixels + cols.end;
        for (byte, &v) in pgm[row.clone()].iter_mut().zip(&float[row]) {
            let t = (v as f64 * pgm_scale).min(255.0);
            // a negative value wraps as the reference's x86 conversion does
            *byte = t as i32 as u8;
        }
    }
    writeln!(out, "writing {} as 1-byte integers", o.pgm_name)?;
    let pgm = Image::Pgm { fpixels, spixels, scale: pgm_scale, bytes: &pgm };
    image_writer::write(&mut files.pgm, pgm).map_err(|e| write_error("-pgmfile", e))?;
    let Some(noise_file) = files.noise.as_mut() else { return files.commit() };
    let roi = roi.map(i64::from);
    let (photons, overloads, written) = match stream {
        NoiseStream::Parallel => {
            let stream = PixelStream { seed: o.seed.wrapping_neg(), first_pixel: 0 };
            let header = parallel_noise_header(header, stream.seed);
            let noise =
                ParallelNoiseFile { image: float, fpixels, spixels, roi, adc_offset: o.adc };
            noise.write(noise_file, &header, stream)
        }
        NoiseStream::C => {
            let noisy =
                noise_image(float, fpixels, spixels, roi, o.adc, &mut NoiseRng::new(o.seed));
            let pixels = SmvPixels::U16(&noisy.pixels);
            let written = image_writer::write(noise_file, Image::Smv(&header, pixels));
            (noisy.photons, noisy.overloads, written)
        }
    };
    writeln!(out, "{} photons on noise image ({} overloads)", f(photons, 0), overloads)?;
    writeln!(out, "writing {} as 2-byte integers", o.noise_name)?;
    written.map_err(|e| write_error("-noisefile", e))?;
    files.commit()
}

/// `-img`: every valid pixel of the input turned back into F with its
/// pixel's last sample, binned by table row, the bins with more than 100
/// pixels written as text (`-stolout`'s content). Returns the text and the
/// last bin's pixel count (which the reference's statistics then use).
#[allow(clippy::too_many_arguments)]
fn extract_bins(
    o: &Options,
    img: &InputImage,
    traces: &[Option<PixelTrace>],
    table: &StolTable,
    r_e_sqr: f64,
    molecules: f64,
    steps: f64,
    out: &mut impl Write,
) -> Result<(Vec<u8>, i64)> {
    let x = table.stols();
    let mut bins: Vec<Vec<f32>> = vec![Vec::new(); x.len()];
    for (j, t) in traces.iter().enumerate() {
        let Some(t) = t else { continue };
        let value = img.pixels[j] as f32;
        let invalid = o.ignore.iter().any(|&v| value == v as f32);
        let deviate = ((value as f64 - o.adc) / o.gain) as f32;
        let sign: f32 = if deviate < 0.0 { -1.0 } else { 1.0 };
        let d = deviate.abs() as f64;
        let pixel_f = (sign as f64
            * (d / t.polar / t.omega / o.fluence / r_e_sqr / molecules * steps).sqrt())
            as f32;
        let mut bin = 0;
        if !invalid {
            bin = t.nearest;
            if bin + 1 < x.len() && t.stol > (x[bin] + x[bin + 1]) / 2.0 {
                bin += 1;
            }
        }
        bins[bin].push(pixel_f);
    }
    let mut text = String::new();
    let mut lines = 0;
    let mut last = 0i64;
    for (bin, values) in bins.iter().enumerate().take(x.len() - 2).skip(2) {
        let n = values.len();
        let (avg, rmsd) = if n == 0 {
            (0.0f32, 0.0f32)
        } else {
            let sum: f32 = values.iter().fold(0.0f32, |a, &v| a + v);
            let avg = sum / n as f32;
            let sumd: f32 = values.iter().fold(0.0f32, |a, &v| {
                let d = (v - avg).abs();
                a + d * d
            });
            (avg, ((sumd / n as f32) as f64).sqrt() as f32)
        };
        let stol = x[bin] / o.stol_mult;
        if n > 100 {
            text += &format!("{} {} {}   0 0  {n}\n", g(stol), g(avg as f64), g(rmsd as f64));
            lines += 1;
        } else {
            writeln!(
                out,
                "WARNING: not enough pixels in bin= {bin} n={n} stol= {} median= 0 avg_arej= {}",
                g(stol),
                g(avg as f64)
            )?;
        }
        last = n as i64;
    }
    writeln!(out, "wrote {} as {lines} lines of text", o.stolout_name)?;
    Ok((text.into_bytes(), last))
}

/// The SMV header nonBragg writes (its keys, values through C `%g`).
fn smv_header(
    o: &Options,
    geo: &PlacedDetector,
    fpixels: usize,
    spixels: usize,
    osc: f64,
) -> SmvHeader {
    SmvHeader::new(fpixels, spixels)
        .number("PIXEL_SIZE", o.pixel * 1000.0)
        .number("DISTANCE", geo.distance * 1000.0)
        .number("WAVELENGTH", o.lambda0 * 1e10)
        .number("BEAM_CENTER_X", geo.xbeam * 1000.0)
        .number("BEAM_CENTER_Y", (o.detsize[1] - geo.ybeam) * 1000.0)
        .number("ORGX", geo.xclose / o.pixel)
        .number("ORGY", geo.yclose / o.pixel)
        .number("CLOSE_DISTANCE", geo.close_distance * 1000.0)
        .number("PHI", o.phi0 * RTD)
        .number("OSC_START", o.phi0 * RTD)
        .number("OSC_RANGE", osc * RTD)
        .number("TWOTHETA", o.twotheta * RTD)
        .entry("DETECTOR_SN", "000")
        .entry("BEAMLINE", "fake")
}

/// nonBragg's output files, opened under temporary names before the render
/// and renamed into place together at the end (in the order the reference
/// writes them: of two flags naming one file, the later output wins).
struct Files {
    /// `-stolout` (with `-img` only).
    stolout: Option<Pending>,
    float: Pending,
    int: Pending,
    pgm: Pending,
    /// `-noisefile` (without `-nonoise`).
    noise: Option<Pending>,
}

impl Files {
    /// Opens every output this run writes; the error names the flag and file.
    fn open(o: &Options, stolout: bool) -> Result<Files> {
        let open = |flag, name: &str| open_output(flag, Path::new(name));
        Ok(Files {
            stolout: stolout.then(|| open("-stolout", &o.stolout_name)).transpose()?,
            float: open("-floatfile", &o.float_name)?,
            int: open("-intfile", &o.int_name)?,
            pgm: open("-pgmfile", &o.pgm_name)?,
            noise: o.noise.then(|| open("-noisefile", &o.noise_name)).transpose()?,
        })
    }

    /// Renames every output into place, all of them or none.
    fn commit(self) -> Result<()> {
        let files = [
            ("-stolout", self.stolout),
            ("-floatfile", Some(self.float)),
            ("-intfile", Some(self.int)),
            ("-pgmfile", Some(self.pgm)),
            ("-noisefile", self.noise),
        ];
        crate::output_files::commit(files.into_iter().filter_map(|(f, p)| Some((f, p?))).collect())
    }
}

/// Refuses an image with pixels that are not finite numbers (no file is
/// written then), naming what made them: two rows of the table within one
/// interpolation window at the same sin θ/λ (the cubic divides by their
/// difference), a source of wavelength 0 (a `-sourcefile` row, or a
/// `-dispersion` of 200 %: sin θ/λ is then no number) or of a weight that
/// is none, or else a fluence that overflows 4-byte floats.
fn check_finite(
    image: &[f32],
    o: &Options,
    stol_name: &str,
    table: &StolTable,
    sources: &[AmorphousSource],
) -> Result<()> {
    let bad = image.iter().filter(|v| !v.is_finite()).count();
    if bad == 0 {
        return Ok(());
    }
    let mut causes = Vec::new();
    // the file's rows sit between two guard rows at each end
    let x = table.stols();
    let rows = x.len().saturating_sub(4);
    let same = (0..rows)
        .find_map(|i| (i + 1..rows.min(i + 4)).find(|&j| x[i + 2] == x[j + 2]).map(|j| (i, j)));
    if let Some((i, j)) = same {
        causes.push(format!(
            "-stol {stol_name}: rows {} and {} have the same sin(theta)/lambda ({}), which the \
             interpolation between them divides by",
            i + 1,
            j + 1,
            g(x[i + 2] / o.stol_mult)
        ));
    }
    let given = match &o.source_name {
        Some(file) => format!("-sourcefile {file}"),
        None => "-lambda/-dispersion".to_string(),
    };
    for (k, s) in sources.iter().enumerate() {
        // (a source at the sample has the beam's direction: no cause)
        if !(s.lambda > 0.0 && s.lambda.is_finite()) {
            causes.push(format!("{given}: source {} has the wavelength {} m", k + 1, g(s.lambda)));
        } else if !s.weight.is_finite() {
            causes.push(format!("{given}: source {} has the weight {}", k + 1, g(s.weight)));
        }
        if causes.len() >= 3 {
            break;
        }
    }
    if causes.is_empty() {
        causes.push(format!(
            "-fluence {} on this sample overflows the 4-byte float image (at most 3.4e+38 \
             photons per pixel)",
            g(o.fluence)
        ));
    }
    bail!(
        "the image has {bad} non-finite pixels (of {}): {}; no image was written",
        image.len(),
        causes.join("; ")
    )
}
