//! kix-manifest
