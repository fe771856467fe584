//! The laboratory axes each beam-centre convention implies.

use crate::config::Convention;

/// The seven direction vectors that define a convention.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Axes {
    /// Direction of increasing fast pixel index.
    pub fdet: [f64; 3],
    /// Direction of increasing slow pixel index.
    pub sdet: [f64; 3],
    /// Detector normal, pointing away from the sample.
    pub odet: [f64; 3],
    /// Direction the X-rays travel.
    pub beam: [f64; 3],
    /// E-vector of the incident beam.
    pub polar: [f64; 3],
    /// Right-handed rotation axis of phi.
    pub spindle: [f64; 3],
    /// Axis of the detector two-theta swing.
    pub twotheta: [f64; 3],
}

impl Axes {
    /// The axes of a named convention, or `None` for [`Convention::Custom`]
    /// (the user's vectors are used then).
    pub fn of(convention: Convention) -> Option<Axes> {
        match convention {
            Convention::Custom => None,
            Convention::Adxv => Some(Axes {
                beam: [0.0, 0.0, 1.0],
                fdet: [1.0, 0.0, 0.0],
                sdet: [0.0, -1.0, 0.0],
                odet: [0.0, 0.0, 1.0],
                twotheta: [-1.0, 0.0, 0.0],
                polar: [1.0, 0.0, 0.0],
                spindle: [1.0, 0.0, 0.0],
            }),
            Convention::Mosflm | Convention::Denzo => Some(Axes {
                beam: [1.0, 0.0, 0.0],
                odet: [1.0, 0.0, 0.0],
                fdet: [0.0, 0.0, 1.0],
                sdet: [0.0, -1.0, 0.0],
                twotheta: [0.0, 0.0, -1.0],
                polar: [0.0, 0.0, 1.0],
                spindle: [0.0, 0.0, 1.0],
            }),
            Convention::Xds => Some(Axes {
                beam: [0.0, 0.0, 1.0],
                fdet: [1.0, 0.0, 0.0],
                sdet: [0.0, 1.0, 0.0],
                odet: [0.0, 0.0, 1.0],
                twotheta: [1.0, 0.0, 0.0],
                polar: [1.0, 0.0, 0.0],
                spindle: [1.0, 0.0, 0.0],
            }),
            Convention::Dials => Some(Axes {
                beam: [0.0, 0.0, 1.0],
                fdet: [1.0, 0.0, 0.0],
                sdet: [0.0, 1.0, 0.0],
                odet: [0.0, 0.0, 1.0],
                twotheta: [0.0, 1.0, 0.0],
                polar: [0.0, 1.0, 0.0],
                spindle: [0.0, 1.0, 0.0],
            }),
        }
    }

    /// Name as the C program prints it before " convention selected."
    pub fn name(convention: Convention) -> &'static str {
        match convention {
            Convention::Custom => "custom",
            Convention::Adxv => "adxv",
            Convention::Mosflm => "mosflm",
            Convention::Xds => "xds",
            Convention::Dials => "dials",
            Convention::Denzo => "denzo",
        }
    }
}
