// Rebuild when a migration is added or changed: `sqlx::migrate!` embeds them at compile time,
// and cargo does not otherwise notice new files in migrations/. The provider catalog
// (providers/*.toml) is embedded the same way: this lists every file for `include_str!`.
use std::io::Write;

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=providers");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("providers");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".toml"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let out = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("catalog_files.rs");
    let mut f = std::fs::File::create(out).unwrap();
    writeln!(f, "pub static FILES: &[(&str, &str)] = &[").unwrap();
    for n in files {
        println!("cargo:rerun-if-changed=providers/{n}");
        let path = dir.join(&n);
        writeln!(
            f,
            "    ({n:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .unwrap();
    }
    writeln!(f, "];").unwrap();
}
