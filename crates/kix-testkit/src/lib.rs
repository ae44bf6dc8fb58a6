//! kix-testkit
