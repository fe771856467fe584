//! The crystal: unit cell and orientation, and the mosaic domains.

pub mod cell;
pub mod matfile;
pub mod mosaic;
