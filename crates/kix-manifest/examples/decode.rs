//! Prints what kix makes of resource files, as checks/kubectl-decode prints
//! what kubectl makes of them: each object as one line of JSON, or the
//! error, then a line `--`. For comparing the two by hand:
//!
//!   cargo run -p kix-manifest --example decode -- FILE...

fn main() {
    for path in std::env::args().skip(1) {
        match std::fs::read(&path) {
            Err(e) => println!("{{\"error\":{:?}}}", e.to_string()),
            Ok(bytes) => match kix_manifest::decode::file_objects(&bytes) {
                Ok(objects) => objects.iter().for_each(|o| println!("{o}")),
                Err(e) => println!("{}", serde_json::json!({ "error": e })),
            },
        }
        println!("--");
    }
}
