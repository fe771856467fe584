//! What varies from shot to shot in a dataset (`nanobragg dataset`): the
//! record each worker keeps of its shots and writes beside each frame of its
//! NXmx series (`nxmx_series`, with the `hdf5` feature). Plain data, so that
//! the datasets' code builds without HDF5.

/// What varies from shot to shot, written beside its frame.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShotRecord {
    /// The shot's index in the dataset (0-based).
    pub shot: u64,
    /// The beam: (wavelength Å, weight) per channel.
    pub spectrum_a: Vec<(f64, f64)>,
    /// Crystal rotation about x, y, z (deg), applied in that order.
    pub misset_deg: [f64; 3],
    /// Unit cells along a, b, c.
    pub n_cells: [f64; 3],
    /// Mosaic spread (deg).
    pub mosaic_spread_deg: f64,
    /// Seed of the mosaic domains.
    pub mosaic_seed: i64,
    /// Photons per m² on the sample.
    pub fluence: f64,
    /// Water around the crystal (µm), the amorphous background's thickness.
    pub water_um: f64,
    /// Seed of the noise image.
    pub noise_seed: i64,
    /// Photons on the image after noise.
    pub photons: f64,
}
