//! kix-api
