// Rebuild when a migration is added or changed: `sqlx::migrate!` embeds them at compile time,
// and cargo does not otherwise notice new files in migrations/.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
