//! Compiles the kubelet's gRPC APIs in proto/ (plugin registration and the DRA plugin API)
//! into Rust with protox, a protobuf compiler written in Rust, so no protoc is needed.

const PROTOS: &[&str] = &["proto/pluginregistration.proto", "proto/dra.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=build.rs");
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(descriptors)?;
    Ok(())
}
