// Rebuild when a migration is added or changed: `sqlx::migrate!` embeds them at compile time,
// and cargo does not otherwise notice new files in migrations/. The provider catalog
// (providers/*.toml) is embedded the same way: this lists every file for `include_str!`.
use std::io::Write;

fn main() -> std::io::Result<()> {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=providers");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("providers");
    // An unreadable catalog folder fails the build rather than embed an empty catalog.
    let mut files: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    files.sort();
    let out_dir = std::env::var("OUT_DIR").map_err(std::io::Error::other)?;
    let out = std::path::Path::new(&out_dir).join("catalog_files.rs");
    let mut f = std::fs::File::create(out)?;
    writeln!(f, "pub static FILES: &[(&str, &str)] = &[")?;
    for n in files {
        println!("cargo:rerun-if-changed=providers/{n}");
        let path = dir.join(&n);
        writeln!(
            f,
            "    ({n:?}, include_str!({:?})),",
            path.display().to_string()
        )?;
    }
    writeln!(f, "];")
}
