//! What a command line asks for: the [`Invocation`] that [`crate::parse`]
//! builds from the flag table ([`crate::flags`]) and that rendering, batch,
//! gradient and refine read. Plain data: nothing here reads a file.

use std::path::PathBuf;

use nanobragg_core::render::Precision;
use nanobragg_core::SimConfig;

/// Output file names and the options that shape the written images.
#[derive(Debug, Clone, PartialEq)]
pub struct Outputs {
    /// `-floatfile`: raw 4-byte float image (default `floatimage.bin`).
    pub floatfile: PathBuf,
    /// `-intfile`: noiseless SMV image (default `intimage.img`).
    pub intfile: PathBuf,
    /// `-pgmfile`: 8-bit PGM preview (default `image.pgm`).
    pub pgmfile: PathBuf,
    /// `-noisefile`: SMV image with Poisson noise (default `noiseimage.img`).
    pub noisefile: PathBuf,
    /// `-intfile` was given (under `-batch`, each shot then writes one).
    pub intfile_given: bool,
    /// `-floatfile` was given (a rotation series writes float images only then,
    /// or when it writes no other image).
    pub floatfile_given: bool,
    /// `-pgmfile` was given (under `-batch`, each shot then writes one).
    pub pgmfile_given: bool,
    /// `-noisefile` was given (under `-batch`, each shot then writes one).
    pub noisefile_given: bool,
    /// `-nxmxfile`: NXmx (HDF5) image in int32 (none by default).
    pub nxmxfile: Option<PathBuf>,
    /// `-cbffile`: miniCBF image in int32 (none by default).
    pub cbffile: Option<PathBuf>,
    /// `-nxmx_compression`: how NXmx frames are stored (`-nxmxfile`, datasets).
    pub nxmx_compression: nanobragg_io::nxmx::Compression,
    /// Write the PGM file (default true; `-nopgm` clears, `-pgmfile`/`-pgmscale` set).
    pub write_pgm: bool,
    /// Write the noise image (default true; `-nonoise` clears, `-noisefile` sets).
    pub calculate_noise: bool,
    /// `-noise_rng`: the random stream of the noise (default nanoBragg.c's).
    pub noise_rng: nanobragg_core::noise_stream::NoiseStream,
    /// `-scale` for the integer image; 0 (or negative) = automatic.
    pub int_scale: f64,
    /// `-pgmscale` for the PGM file; 0 (or negative) = automatic.
    pub pgm_scale: f64,
    /// `-adc` offset added to SMV pixels (default 40).
    pub adc_offset: f64,
    /// `-dump`: the Fdump file written after reading `-hkl` and read back when
    /// no `-hkl` is given (default `Fdump.bin`).
    pub dumpfile: PathBuf,
    /// The detector response applied to the noise image (noisify's options).
    pub response: ResponseOptions,
}

/// noisify's detector response as options of a render: applied to the noise
/// image when any of them is given (see [`ResponseOptions::is_set`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseOptions {
    /// `-readout_noise`: Gaussian read-out noise, ADU rms.
    pub readout_noise: f64,
    /// `-flicker`: fractional rms of the source intensity per pixel.
    pub flicker_noise: f64,
    /// `-calibration`: fractional rms of the per-pixel calibration error.
    pub calibration_noise: f64,
    /// `-calib_seed`: seed of the calibration error (default: noisify's).
    pub calib_seed: Option<i64>,
    /// `-gain`: ADU per photon (default 1).
    pub gain: Option<f64>,
    /// `-psf`: `gauss` or `fiber`.
    pub psf: Option<nanobragg_core::psf::PsfShape>,
    /// `-psf_fwhm`: the PSF's full width at half maximum (µm; default 46).
    pub psf_fwhm_um: Option<f64>,
    /// `-psf_radius`: kernel radius in pixels (0: automatic).
    pub psf_radius: Option<i64>,
    /// `-bits 32`: a 32-bit noise image (noisify's `-bits`).
    pub bits32: bool,
}

impl Default for ResponseOptions {
    fn default() -> Self {
        Self {
            readout_noise: 0.0,
            flicker_noise: 0.0,
            calibration_noise: 0.0,
            calib_seed: None,
            gain: None,
            psf: None,
            psf_fwhm_um: None,
            psf_radius: None,
            bits32: false,
        }
    }
}

impl ResponseOptions {
    /// Whether any option changes the noise image from nanoBragg.c's.
    pub fn is_set(&self) -> bool {
        self.readout_noise > 0.0
            || self.flicker_noise > 0.0
            || self.calibration_noise > 0.0
            || self.gain.is_some()
            || self.psf.is_some()
            || self.bits32
    }
}

impl Default for Outputs {
    fn default() -> Self {
        Self {
            floatfile: PathBuf::from("floatimage.bin"),
            intfile: PathBuf::from("intimage.img"),
            pgmfile: PathBuf::from("image.pgm"),
            noisefile: PathBuf::from("noiseimage.img"),
            intfile_given: false,
            floatfile_given: false,
            pgmfile_given: false,
            noisefile_given: false,
            nxmxfile: None,
            cbffile: None,
            nxmx_compression: nanobragg_io::nxmx::Compression::None,
            write_pgm: true,
            calculate_noise: true,
            noise_rng: nanobragg_core::noise_stream::NoiseStream::C,
            int_scale: 0.0,
            pgm_scale: 0.0,
            adc_offset: 40.0,
            dumpfile: PathBuf::from("Fdump.bin"),
            response: ResponseOptions::default(),
        }
    }
}

/// Second-derivative images of `-gradient` (`-curvatures`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Curvatures {
    /// None (default).
    None,
    /// d² pixel / d p² for each parameter.
    Diagonal,
    /// Also d² pixel / d a d b for each pair.
    Mixed,
}

/// Where the render runs (`-device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    /// `cpu` (default): always on the CPU.
    #[default]
    Cpu,
    /// `cuda`: on an NVIDIA GPU; an error if none can be used.
    Cuda,
    /// `auto`: a GPU when one can be used, otherwise the CPU.
    Auto,
}

/// Everything the command line asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// The simulation inputs, files already read.
    pub config: SimConfig,
    /// Output files and scaling.
    pub outputs: Outputs,
    /// `-hkl` file (already read into `config.sf.source`).
    pub hkl_path: Option<PathBuf>,
    /// `-model` file: the atomic model whose structure factors (computed
    /// into `config.sf.source`) the render takes.
    pub model_path: Option<PathBuf>,
    /// `-spacegroup`: the space group of `-model` (instead of the file's)
    /// or of the asymmetric unit of `-hkl`.
    pub space_group: Option<String>,
    /// `-anomalous EL FP FDP`, as typed, in order.
    pub anomalous: Vec<crate::model::AnomalousArgs>,
    /// `-mat` file (already read into `config.crystal.mat`).
    pub mat_path: Option<PathBuf>,
    /// `-sourcefile` (already read into `config.beam.sources`).
    pub source_path: Option<PathBuf>,
    /// `-stol`/`-4stol`/`-Q`: the amorphous sample's table, the flag and
    /// what turns its x into sin θ/λ in 1/m.
    pub stol: Option<(PathBuf, &'static str, f64)>,
    /// The amorphous sample as its flags describe it (no table yet); `None`
    /// when no sample flag was given.
    pub amorphous: Option<nanobragg_core::config::AmorphousConfig>,
    /// `-spectrum` (already read into `config.beam.spectrum`).
    pub spectrum_path: Option<PathBuf>,
    /// `-batch`: file of misset angles, one shot per line.
    pub batch_path: Option<PathBuf>,
    /// `-img` file whose header was applied (the last `-img` given).
    pub img_path: Option<PathBuf>,
    /// Width and height of the `-img` image (its pixels are not used).
    pub img_size: Option<(usize, usize)>,
    /// The files of `-expt` and `-geom`, read before the flags are applied
    /// (each is applied where its flag stands).
    pub detector_files: Vec<(PathBuf, crate::expt::DetectorFile)>,
    /// Values taken from `-mask`/`-img` headers that a flag could also set, for
    /// error messages: (that flag, `-img FILE header KEY=VALUE`, value).
    pub header_values: Vec<(&'static str, String, f64)>,
    /// `-mask` file whose header and pixels were applied (the last `-mask` given).
    pub mask_path: Option<PathBuf>,
    /// `-seed` as typed (nanoBragg.c negates it internally); `None` = from the clock.
    pub seed: Option<i64>,
    /// `-printout` (also set by `-printout_pixel`).
    pub printout: bool,
    /// `-printout_pixel fast slow`.
    pub printout_pixel: Option<(i64, i64)>,
    /// `-progress` (Some(true)), `-noprogress` (Some(false)), or not given.
    pub progress: Option<bool>,
    /// `-dtype` and `-exact`: how the image is computed. `-dtype float32`
    /// gives [`Precision::Fast32`], and `-exact` does not override it;
    /// `-exact` gives [`Precision::Exact64`]; `-dtype float64` turns f32
    /// back into [`Precision::Fast64`] (the default).
    pub precision: Precision,
    /// `-threads`: worker threads; 0 = all cores.
    pub threads: usize,
    /// `-gradient`: the parameter list as given (checked when run).
    pub gradient: Option<String>,
    /// `-curvatures`, `-curvatures_mixed`: second derivatives to write.
    pub curvatures: Curvatures,
    /// `-gradfile`: prefix of the derivative images (default `grad`).
    pub gradfile: String,
    /// `-device`.
    pub device: Device,
    /// Warnings to print before running (ignored flags, truncated integers).
    pub warnings: Vec<String>,
    /// `-h`/`--help` was given: print [`crate::flags::help_text`] and exit; the
    /// other fields are then left at their defaults.
    pub help: bool,
    /// The rotation series: `-images`, or an `-expt` scan.
    pub series: Series,
    /// `-shard i/K` as given: the part of a rotation series this run renders.
    pub shard: Option<String>,
    /// `-resume`: render only the images of a rotation series that no file holds.
    pub resume: bool,
    /// The `-expt` list of several experiments that the command renders
    /// one shot each, and how many it holds.
    pub expt_shots: Option<(PathBuf, usize)>,
    /// The experiment of that list `config` describes (from 0).
    pub expt_shot: usize,
    /// Each experiment's configuration, in order, where [`Self::expt_shots`]
    /// is set (the first is `config`).
    pub shot_configs: Vec<SimConfig>,
    /// The command line as given (without the program name).
    pub args: Vec<String>,
}

/// A rotation series: `images` images numbered from `first_image`, image k
/// (0-based) turning the crystal from `-phi` + k·`-osc` by `-osc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Series {
    /// The number of the first image (an `-expt` scan's `image_range[0]`, else 1).
    pub first_image: usize,
    /// How many images (1: one render, not a series).
    pub images: usize,
}

impl Default for Series {
    fn default() -> Self {
        Series { first_image: 1, images: 1 }
    }
}

impl Default for Invocation {
    fn default() -> Self {
        Self {
            config: SimConfig::default(),
            outputs: Outputs::default(),
            hkl_path: None,
            model_path: None,
            space_group: None,
            anomalous: Vec::new(),
            mat_path: None,
            source_path: None,
            stol: None,
            amorphous: None,
            spectrum_path: None,
            batch_path: None,
            img_path: None,
            img_size: None,
            detector_files: Vec::new(),
            header_values: Vec::new(),
            mask_path: None,
            seed: None,
            printout: false,
            printout_pixel: None,
            progress: None,
            precision: Precision::Fast64,
            threads: 0,
            gradient: None,
            curvatures: Curvatures::None,
            gradfile: "grad".into(),
            device: Device::Cpu,
            warnings: Vec::new(),
            help: false,
            series: Series::default(),
            expt_shots: None,
            expt_shot: 0,
            shot_configs: Vec::new(),
            shard: None,
            resume: false,
            args: Vec::new(),
        }
    }
}
