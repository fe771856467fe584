//! The crystal: unit cell and orientation, the mosaic domains, and space groups.

pub mod cell;
pub mod matfile;
pub mod mosaic;
pub mod space_group;
mod space_group_table;
