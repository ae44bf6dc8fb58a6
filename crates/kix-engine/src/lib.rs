//! kix-engine
