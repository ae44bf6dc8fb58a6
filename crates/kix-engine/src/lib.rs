//! kix-engine

pub mod health;
