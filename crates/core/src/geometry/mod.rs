//! Detector and beam geometry: conventions, pivots, and the resolved detector.

pub mod convention;
pub mod detector;

pub use convention::Axes;
pub use detector::Detector;
pub mod panel;

pub use panel::{panel_configs, PanelLayout};
