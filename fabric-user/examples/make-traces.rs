//! Regenerates the project's traces under testbed/traces/ (see fabric-user/src/trace/shipped.rs):
//! `cargo run -p fabric-user --example make-traces [DIR]`.
fn main() -> anyhow::Result<()> {
    let dir = std::env::args().nth(1).map_or_else(fabric_user::run::trace::shipped::dir, std::path::PathBuf::from);
    for p in fabric_user::run::trace::shipped::write_all(&dir)? {
        println!("wrote {}", p.display());
    }
    Ok(())
}
