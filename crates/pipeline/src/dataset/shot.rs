//! What is drawn for each shot of a dataset: from the dataset's seed and
//! the shot's index only, each quantity from a stream of its own (adding a
//! distribution to a spec leaves the other draws as they were).

use super::spec::{DatasetSpec, Dist, Spectrum};

/// A random stream of one shot (SplitMix64, keyed by seed, shot and stream).
#[derive(Debug, Clone)]
pub struct ShotRng(u64);

/// SplitMix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl ShotRng {
    /// The stream `stream` of shot `shot` in a dataset of seed `seed`.
    pub fn new(seed: u64, shot: u64, stream: u64) -> ShotRng {
        ShotRng(mix(mix(mix(seed) ^ shot) ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.uniform(); // (0, 1]
        let v = self.uniform();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// A value of `d`.
    pub fn draw(&mut self, d: &Dist) -> f64 {
        let (a, b) = d.bounds();
        a + (b - a) * self.uniform()
    }

    /// A seed for nanoBragg's generators: positive, below 2^31.
    pub fn seed(&mut self) -> i64 {
        1 + (self.next_u64() % ((1 << 31) - 2)) as i64
    }
}

/// The streams, one per drawn quantity.
mod stream {
    pub const ORIENTATION: u64 = 1;
    pub const CELLS: u64 = 2;
    pub const MOSAIC: u64 = 3;
    pub const FLUENCE: u64 = 4;
    pub const SPECTRUM: u64 = 5;
    pub const WATER: u64 = 6;
    pub const SEEDS: u64 = 7;
}

/// One shot's draws.
#[derive(Debug, Clone, PartialEq)]
pub struct ShotDraw {
    /// The shot's index.
    pub shot: u64,
    /// Crystal rotation about x, y, z (deg; `-misset`), where random.
    pub misset_deg: Option<[f64; 3]>,
    /// Unit cells along each axis (`-N`).
    pub n_cells: Option<f64>,
    /// Crystal size (µm, a cube; `-xtalsize`).
    pub size_um: Option<f64>,
    /// Mosaic spread (deg).
    pub mosaic_deg: Option<f64>,
    /// Fluence relative to the command line's.
    pub fluence_factor: f64,
    /// The shot's spectrum, (λ Å, weight) lines; `None`: the command line's beam.
    pub spectrum: Option<Vec<[f64; 2]>>,
    /// Water around the crystal (µm).
    pub water_um: Option<f64>,
    /// Seed of the noise image.
    pub noise_seed: i64,
    /// Seed of the mosaic domains.
    pub mosaic_seed: i64,
}

/// Draws shot `shot` of `spec`; `lambda_a`: the command line's wavelength
/// (the SASE envelope's centre), `files`: the spectrum files' lines.
pub fn draw(spec: &DatasetSpec, shot: u64, lambda_a: f64, files: &[Vec<[f64; 2]>]) -> ShotDraw {
    let rng = |s| ShotRng::new(spec.seed, shot, s);
    let misset_deg = spec.random_orientation.then(|| {
        let mut r = rng(stream::ORIENTATION);
        misset_angles(&uniform_rotation(r.uniform(), r.uniform(), r.uniform()))
    });
    let c = &spec.crystal;
    let n_cells = c.n_cells.map(|d| {
        // a whole number of cells, each equally likely
        let (a, b) = d.bounds();
        let (a, b) = (a.ceil(), b.floor().max(a.ceil()));
        (a + ((b - a + 1.0) * rng(stream::CELLS).uniform()).floor()).min(b)
    });
    let size_um = c.size_um.map(|d| rng(stream::CELLS).draw(&d));
    let mosaic_deg = c.mosaic_deg.map(|d| rng(stream::MOSAIC).draw(&d));
    let j = spec.fluence.jitter;
    let fluence_factor = match j > 0.0 {
        // log-normal of mean 1 and relative rms j
        true => {
            let s2 = (1.0 + j * j).ln();
            (-s2 / 2.0 + s2.sqrt() * rng(stream::FLUENCE).normal()).exp()
        }
        false => 1.0,
    };
    let spectrum = match &spec.spectrum {
        None => None,
        Some(Spectrum::Sase { channels, bandwidth, spikes, spike_width }) => Some(sase(
            &mut rng(stream::SPECTRUM),
            lambda_a,
            *channels,
            *bandwidth,
            *spikes,
            *spike_width,
        )),
        Some(Spectrum::Files { .. }) => Some(files[(shot % files.len() as u64) as usize].clone()),
    };
    let water_um = spec.background.water_um.map(|d| rng(stream::WATER).draw(&d));
    let mut seeds = rng(stream::SEEDS);
    ShotDraw {
        shot,
        misset_deg,
        n_cells,
        size_um,
        mosaic_deg,
        fluence_factor,
        spectrum,
        water_um,
        noise_seed: seeds.seed(),
        mosaic_seed: seeds.seed(),
    }
}

/// FWHM of a Gaussian over its standard deviation.
const FWHM_PER_SIGMA: f64 = 2.354_820_045_030_949;

/// A SASE spectrum: `spikes` spikes, centres drawn from a Gaussian envelope
/// of FWHM `bandwidth · λ` about `lambda_a`, heights exponential (the
/// statistics of a chaotic source's modes), each a Gaussian of FWHM
/// `spike_width · λ`; binned into `channels` channels across ±1.5 envelope
/// FWHM (each weight the spikes' intensity within the channel), weights
/// summing to 1.
pub fn sase(
    rng: &mut ShotRng,
    lambda_a: f64,
    channels: usize,
    bandwidth: f64,
    spikes: usize,
    spike_width: f64,
) -> Vec<[f64; 2]> {
    let fwhm = bandwidth * lambda_a;
    let sigma_env = fwhm / FWHM_PER_SIGMA;
    let sigma_spike = spike_width * lambda_a / FWHM_PER_SIGMA;
    let modes: Vec<(f64, f64)> = (0..spikes)
        .map(|_| {
            let centre = lambda_a + sigma_env * rng.normal();
            let height = -(1.0 - rng.uniform()).ln();
            (centre, height)
        })
        .collect();
    let (lo, step) = (lambda_a - 1.5 * fwhm, 3.0 * fwhm / (channels - 1) as f64);
    let mut lines: Vec<[f64; 2]> = (0..channels)
        .map(|c| {
            let l = lo + step * c as f64;
            // each spike's intensity over the channel's width, so that a
            // spike narrower than the channels still counts in full
            let cdf = |x: f64, m: f64| erf((x - m) / (sigma_spike * std::f64::consts::SQRT_2));
            let w = (modes.iter())
                .map(|&(m, h)| h * 0.5 * (cdf(l + step / 2.0, m) - cdf(l - step / 2.0, m)))
                .sum::<f64>();
            [l, w]
        })
        .collect();
    let total: f64 = lines.iter().map(|l| l[1]).sum();
    if total > 0.0 && total.is_finite() {
        lines.iter_mut().for_each(|l| l[1] /= total);
    } else {
        // every spike fell between channels far out: the envelope alone
        let w = |l: f64| (-0.5 * ((l - lambda_a) / sigma_env).powi(2)).exp();
        let sum: f64 = lines.iter().map(|l| w(l[0])).sum();
        lines.iter_mut().for_each(|l| l[1] = w(l[0]) / sum);
    }
    lines
}

/// The error function (Abramowitz and Stegun 7.1.26; absolute error below
/// 1.5e-7, ample for spectral weights).
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    (1.0 - poly * (-x * x).exp()).copysign(x)
}

/// A rotation matrix (row-major) uniformly distributed over all rotations,
/// from three uniform numbers (Shoemake's unit quaternion).
pub fn uniform_rotation(u1: f64, u2: f64, u3: f64) -> [[f64; 3]; 3] {
    use std::f64::consts::TAU;
    let (a, b) = ((1.0 - u1).sqrt(), u1.sqrt());
    let (x, y, z, w) =
        (a * (TAU * u2).sin(), a * (TAU * u2).cos(), b * (TAU * u3).sin(), b * (TAU * u3).cos());
    [
        [1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - z * w), 2.0 * (x * z + y * w)],
        [2.0 * (x * y + z * w), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - x * w)],
        [2.0 * (x * z - y * w), 2.0 * (y * z + x * w), 1.0 - 2.0 * (x * x + y * y)],
    ]
}

/// The angles (deg) about x, then y, then z that give the rotation `r`
/// (`r = Rz·Ry·Rx`, as `-misset` applies them).
pub fn misset_angles(r: &[[f64; 3]; 3]) -> [f64; 3] {
    let y = (-r[2][0]).clamp(-1.0, 1.0).asin();
    let (x, z) = if r[2][0].abs() < 1.0 - 1e-12 {
        (r[2][1].atan2(r[2][2]), r[1][0].atan2(r[0][0]))
    } else {
        // gimbal lock: only x − z (or x + z) is fixed; put it all in x
        ((-r[1][2]).atan2(r[1][1]), 0.0)
    };
    [x.to_degrees(), y.to_degrees(), z.to_degrees()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use nanobragg_core::vec3::rotate;

    #[test]
    fn angles_give_back_the_rotation() {
        let mut rng = ShotRng::new(1, 2, 3);
        for _ in 0..200 {
            let r = uniform_rotation(rng.uniform(), rng.uniform(), rng.uniform());
            let [x, y, z] = misset_angles(&r).map(f64::to_radians);
            for (k, e) in [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]].iter().enumerate() {
                let v = rotate(*e, x, y, z);
                for i in 0..3 {
                    assert!((v[i] - r[i][k]).abs() < 1e-12, "{v:?} vs column {k} of {r:?}");
                }
            }
        }
    }

    #[test]
    fn rotations_are_uniform() {
        // a uniform rotation takes the beam axis to a uniform point on the
        // sphere: each coordinate's mean 0 and mean square 1/3
        let mut rng = ShotRng::new(9, 0, 1);
        let n = 20000;
        let (mut mean, mut sq) = ([0.0f64; 3], [0.0f64; 3]);
        for _ in 0..n {
            let r = uniform_rotation(rng.uniform(), rng.uniform(), rng.uniform());
            for i in 0..3 {
                mean[i] += r[i][0] / n as f64;
                sq[i] += r[i][0] * r[i][0] / n as f64;
            }
        }
        for i in 0..3 {
            assert!(mean[i].abs() < 0.02 && (sq[i] - 1.0 / 3.0).abs() < 0.02, "{mean:?} {sq:?}");
        }
    }

    #[test]
    fn error_function() {
        for (x, want) in
            [(0.0, 0.0), (0.5, 0.520_499_877_8), (1.0, 0.842_700_792_9), (-2.0, -0.995_322_265)]
        {
            assert!((erf(x) - want).abs() < 2e-7, "erf({x}) = {}", erf(x));
        }
    }

    #[test]
    fn narrow_spikes_keep_their_weight() {
        // one spike far narrower than a channel: all its weight in the channel
        // that holds it, wherever in the channel it falls
        let mut rng = ShotRng::new(4, 0, 5);
        let lines = sase(&mut rng, 1.0, 8, 0.01, 1, 1e-6);
        let max = lines.iter().map(|l| l[1]).fold(0.0, f64::max);
        assert!(max > 0.999, "{lines:?}");
    }

    #[test]
    fn draws_depend_on_seed_and_shot_only() {
        let spec = super::super::spec::DatasetSpec::parse(
            std::path::Path::new("x.toml"),
            "args = \"\"\nshots = 4\n[crystal]\nn_cells = [5, 7]\nmosaic_deg = [0, 0.1]\n\
             [fluence]\njitter = 0.2\n[spectrum]\nmodel = \"sase\"\n",
        )
        .unwrap();
        let a = draw(&spec, 3, 1.3, &[]);
        assert_eq!(a, draw(&spec, 3, 1.3, &[]));
        assert_ne!(a, draw(&spec, 2, 1.3, &[]));
        let n = a.n_cells.unwrap();
        assert!((5.0..=7.0).contains(&n) && n.fract() == 0.0);
        let sp = a.spectrum.unwrap();
        assert_eq!(sp.len(), 100);
        assert!((sp.iter().map(|l| l[1]).sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(sp.iter().all(|l| (l[0] - 1.3).abs() <= 1.5 * 0.003 * 1.3 + 1e-12));
        // log-normal jitter: mean 1, relative rms 0.2
        let f: Vec<f64> = (0..4000).map(|i| draw(&spec, i, 1.3, &[]).fluence_factor).collect();
        let m = f.iter().sum::<f64>() / f.len() as f64;
        let rms = (f.iter().map(|x| (x - m).powi(2)).sum::<f64>() / f.len() as f64).sqrt();
        assert!((m - 1.0).abs() < 0.02 && (rms - 0.2).abs() < 0.02, "{m} {rms}");
    }
}
