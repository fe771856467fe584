//! The dataset specification (`nanobragg dataset SPEC.toml`): the shared
//! model as a command line, and what varies from shot to shot.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use serde::Deserialize;

/// A value per shot: fixed, or drawn uniformly from `[min, max]`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Dist {
    /// The same for every shot.
    Fixed(f64),
    /// Uniform between the two (inclusive).
    Range([f64; 2]),
}

impl Dist {
    /// The smallest and largest value.
    pub fn bounds(&self) -> (f64, f64) {
        match *self {
            Dist::Fixed(v) => (v, v),
            Dist::Range([a, b]) => (a, b),
        }
    }

    fn check(&self, what: &str, min: f64) -> Result<()> {
        let (a, b) = self.bounds();
        if !(a.is_finite() && b.is_finite()) || a > b || a < min {
            bail!("{what}: expected a number or [min, max] with {min} <= min <= max");
        }
        Ok(())
    }
}

/// How each shot's crystal is turned.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Orientation {
    /// A uniformly random rotation per shot (default); `false` keeps the
    /// command line's `-misset`.
    #[serde(default = "yes")]
    pub random: bool,
}

fn yes() -> bool {
    true
}

/// The crystal's size and mosaicity per shot.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Crystal {
    /// Unit cells along each axis (`-N`), a whole number per shot.
    pub n_cells: Option<Dist>,
    /// Crystal size (µm, a cube: `-xtalsize`), instead of `n_cells`.
    pub size_um: Option<Dist>,
    /// Mosaic spread (deg, `-mosaic`); the domains are `-mosaic_domains`.
    pub mosaic_deg: Option<Dist>,
}

/// Shot-to-shot fluence.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fluence {
    /// Relative rms of the fluence (log-normal, mean 1).
    pub jitter: f64,
}

/// The spectrum model of each shot.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "model", rename_all = "lowercase", deny_unknown_fields)]
pub enum Spectrum {
    /// Self-amplified spontaneous emission: random spikes under a Gaussian
    /// envelope centred on `-lambda`.
    Sase {
        /// Wavelength channels rendered (default 100).
        #[serde(default = "channels")]
        channels: usize,
        /// The envelope's FWHM relative to the wavelength (default 0.003).
        #[serde(default = "bandwidth")]
        bandwidth: f64,
        /// Spikes per shot (default 20).
        #[serde(default = "spikes")]
        spikes: usize,
        /// A spike's FWHM relative to the wavelength (default 0.0002).
        #[serde(default = "spike_width")]
        spike_width: f64,
    },
    /// Spectrum files (`-spectrum`'s format); shot i uses `files[i % len]`.
    Files {
        /// The files, relative to the current folder.
        files: Vec<PathBuf>,
    },
}

fn channels() -> usize {
    100
}
fn bandwidth() -> f64 {
    0.003
}
fn spikes() -> usize {
    20
}
fn spike_width() -> f64 {
    2e-4
}

/// The amorphous background per shot.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Background {
    /// Water around the crystal (µm, `-water`).
    pub water_um: Option<Dist>,
}

/// The command line of the shared model: one string (split at white
/// space) or a list of arguments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
enum Args {
    Line(String),
    List(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    args: Args,
    shots: u64,
    #[serde(default = "one")]
    seed: u64,
    output: Option<PathBuf>,
    name: Option<String>,
    #[serde(default)]
    shots_per_file: u64,
    #[serde(default)]
    noiseless: bool,
    orientation: Option<Orientation>,
    #[serde(default)]
    crystal: Crystal,
    #[serde(default)]
    fluence: Fluence,
    spectrum: Option<Spectrum>,
    #[serde(default)]
    background: Background,
}

/// The most shots one spec takes: each worker holds its list of shots.
pub const MAX_SHOTS: u64 = 100_000_000;
/// The most channels of a SASE spectrum: each is a source of the render.
pub const MAX_CHANNELS: usize = 100_000;
/// The most spikes of a SASE spectrum: each is summed over every channel.
pub const MAX_SPIKES: usize = 10_000;

fn one() -> u64 {
    1
}

/// A dataset as its file describes it, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetSpec {
    /// The spec file.
    pub path: PathBuf,
    /// Its text, stored in every output file.
    pub text: String,
    /// The shared model's command line (any render flags).
    pub args: Vec<String>,
    /// Shots in the dataset; shot i is 0-based.
    pub shots: u64,
    /// The dataset's seed: shot i's draws depend on it and i only.
    pub seed: u64,
    /// Folder of the output files (created if missing).
    pub output: PathBuf,
    /// The files' name: `<name>_<worker>.nxs`.
    pub name: String,
    /// At most this many shots a file (0: a worker's shots in one file).
    pub shots_per_file: u64,
    /// Also keep the float images before noise (`/entry/simulation/noiseless`).
    pub noiseless: bool,
    /// Random orientation per shot.
    pub random_orientation: bool,
    /// Crystal size and mosaicity.
    pub crystal: Crystal,
    /// Fluence jitter.
    pub fluence: Fluence,
    /// Per-shot spectrum (`None`: the command line's beam).
    pub spectrum: Option<Spectrum>,
    /// Amorphous background.
    pub background: Background,
}

impl DatasetSpec {
    /// Reads and checks `path`.
    pub fn read(path: &Path) -> Result<DatasetSpec> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow!("dataset: cannot read {}: {e}", path.display()))?;
        Self::parse(path, &text).map_err(|e| anyhow!("dataset {}: {e}", path.display()))
    }

    /// Parses and checks the text of a spec file (`path`: its name, for the
    /// default `name`).
    pub fn parse(path: &Path, text: &str) -> Result<DatasetSpec> {
        let f: SpecFile = toml::from_str(text).map_err(|e| anyhow!("{}", e.to_string().trim()))?;
        let args = match f.args {
            Args::Line(s) => s.split_whitespace().map(String::from).collect(),
            Args::List(v) => v,
        };
        if f.shots == 0 {
            bail!("shots: at least one shot");
        }
        if f.shots > MAX_SHOTS {
            bail!(
                "shots: {} is more than the {MAX_SHOTS} shots one spec takes (its shot list is \
                 held in memory): split the dataset into specs of their own seeds",
                f.shots
            );
        }
        let c = &f.crystal;
        if c.n_cells.is_some() && c.size_um.is_some() {
            bail!("[crystal]: give n_cells or size_um, not both");
        }
        if let Some(d) = &c.n_cells {
            d.check("[crystal] n_cells", 1.0)?;
        }
        if let Some(d) = &c.size_um {
            d.check("[crystal] size_um", f64::MIN_POSITIVE)?;
        }
        if let Some(d) = &c.mosaic_deg {
            d.check("[crystal] mosaic_deg", 0.0)?;
        }
        if let Some(d) = &f.background.water_um {
            d.check("[background] water_um", 0.0)?;
        }
        if !(f.fluence.jitter.is_finite() && f.fluence.jitter >= 0.0) {
            bail!("[fluence] jitter: a relative rms >= 0");
        }
        match &f.spectrum {
            Some(Spectrum::Sase { channels, bandwidth, spikes, spike_width }) => {
                if *channels < 2 || *spikes == 0 {
                    bail!("[spectrum] sase: at least 2 channels and 1 spike");
                }
                if *channels > MAX_CHANNELS || *spikes > MAX_SPIKES {
                    bail!(
                        "[spectrum] sase: at most {MAX_CHANNELS} channels and {MAX_SPIKES} \
                         spikes (given {channels} and {spikes}); each channel is a source of \
                         every shot's render"
                    );
                }
                let ok = |v: f64| v.is_finite() && v > 0.0 && v < 0.5;
                if !ok(*bandwidth) || !ok(*spike_width) {
                    bail!("[spectrum] sase: bandwidth and spike_width are relative widths in (0, 0.5)");
                }
            }
            Some(Spectrum::Files { files }) if files.is_empty() => {
                bail!("[spectrum] files: at least one file")
            }
            _ => {}
        }
        let name = match f.name {
            Some(n) => n,
            None => path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        };
        if name.is_empty() || name.contains(['/', '\\']) {
            bail!("name: a file name without folders");
        }
        Ok(DatasetSpec {
            path: path.to_path_buf(),
            text: text.to_string(),
            args,
            shots: f.shots,
            seed: f.seed,
            output: f.output.unwrap_or_else(|| PathBuf::from(".")),
            name,
            shots_per_file: f.shots_per_file,
            noiseless: f.noiseless,
            random_orientation: f.orientation.is_none_or(|o| o.random),
            crystal: f.crystal,
            fluence: f.fluence,
            spectrum: f.spectrum,
            background: f.background,
        })
    }

    /// The digest of the spec's text (FNV-1a, 64 bits, hex): files written
    /// from another spec are not taken for this one's by `-resume`.
    pub fn digest(&self) -> String {
        digest(&self.text)
    }
}

/// The FNV-1a digest (64 bits, hex) of `text`: what tells a resumed run's
/// files from another specification's.
pub fn digest(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<DatasetSpec> {
        DatasetSpec::parse(Path::new("set/run.toml"), text)
    }

    #[test]
    fn a_full_spec() {
        let s = parse(
            r#"
            args = "-default_F 100 -cell 50 50 50 90 90 90 -detpixels 64"
            shots = 16
            seed = 7
            output = "out"
            shots_per_file = 4
            noiseless = true
            [crystal]
            n_cells = [5, 10]
            mosaic_deg = 0.05
            [fluence]
            jitter = 0.1
            [spectrum]
            model = "sase"
            channels = 50
            [background]
            water_um = [10, 100]
            "#,
        )
        .unwrap();
        assert_eq!(s.args.len(), 11);
        assert_eq!((s.shots, s.seed, s.shots_per_file, s.name.as_str()), (16, 7, 4, "run"));
        assert_eq!(s.crystal.n_cells, Some(Dist::Range([5.0, 10.0])));
        assert_eq!(s.crystal.mosaic_deg, Some(Dist::Fixed(0.05)));
        assert!(s.random_orientation && s.noiseless);
        assert_eq!(
            s.spectrum,
            Some(Spectrum::Sase { channels: 50, bandwidth: 0.003, spikes: 20, spike_width: 2e-4 })
        );
        assert_eq!(s.digest().len(), 16);
    }

    #[test]
    fn bad_specs_name_the_problem() {
        let e = |t: &str| parse(t).unwrap_err().to_string();
        assert!(e("shots = 4").contains("args"), "{}", e("shots = 4"));
        assert!(e("args = \"\"\nshots = 0").contains("at least one shot"));
        assert!(e("args = \"\"\nshots = 2\nwhatever = 1").contains("whatever"));
        let both = "args = \"\"\nshots = 2\n[crystal]\nn_cells = 5\nsize_um = 1";
        assert!(e(both).contains("not both"));
        let range = "args = \"\"\nshots = 2\n[crystal]\nn_cells = [9, 5]";
        assert!(e(range).contains("min <= max"));
        let model = "args = \"\"\nshots = 2\n[spectrum]\nmodel = \"laser\"";
        assert!(e(model).contains("laser"), "{}", e(model));
        // sizes that could not be allocated (or would take forever) are refused
        for shots in ["9223372036854775807", "1000000000000000000", "100000001"] {
            let t = format!("args = \"\"\nshots = {shots}");
            assert!(e(&t).contains("more than the 100000000 shots"), "{}", e(&t));
        }
        let sase = |channels: &str, spikes: &str| {
            format!(
                "args = \"\"\nshots = 2\n[spectrum]\nmodel = \"sase\"\nchannels = {channels}\n\
                 bandwidth = 0.003\nspikes = {spikes}\nspike_width = 2e-4"
            )
        };
        for (c, k) in [("9223372036854775807", "20"), ("1000000000", "20"), ("50", "1000000000000")]
        {
            let t = sase(c, k);
            assert!(e(&t).contains("at most 100000 channels and 10000 spikes"), "{}", e(&t));
        }
        assert!(parse(&sase("100000", "10000")).is_ok());
    }
}
