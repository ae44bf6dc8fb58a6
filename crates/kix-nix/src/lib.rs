//! kix-nix
