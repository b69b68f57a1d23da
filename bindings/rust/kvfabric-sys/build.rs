//! Generates the bindings from `include/kvfabric.h` and finds `libkvfabric.so`.
//!
//! Where the header is: `KVFABRIC_INCLUDE_DIR`, else the crate's own
//! `include/` (a link to the checkout's `include/`, which `cargo package`
//! copies into the published crate), else pkg-config's `kvfabric`. Where the library is (unless the `no-link`
//! feature is on): `KVFABRIC_LIB_DIR`, else pkg-config's `kvfabric` (CMake
//! writes `kvfabric.pc` into its build tree: point `PKG_CONFIG_PATH` there,
//! or at an installed one), else the `build/src` of the checkout.
use std::env;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=KVFABRIC_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=KVFABRIC_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let checkout = manifest.join("../../..");
    let linking = env::var_os("CARGO_FEATURE_NO_LINK").is_none();

    let library = if linking {
        pkg_config::Config::new().cargo_metadata(false).probe("kvfabric").ok()
    } else {
        None
    };
    let include = env::var_os("KVFABRIC_INCLUDE_DIR")
        .map(PathBuf::from)
        .or_else(|| Some(manifest.join("include")).filter(|p| p.join("kvfabric.h").exists()))
        .or_else(|| library.as_ref().and_then(|l| l.include_paths.first().cloned()))
        .unwrap_or_else(|| {
            panic!(
                "kvfabric-sys: include/kvfabric.h not found; set KVFABRIC_INCLUDE_DIR to the directory that holds it \
                 (the include/ of a kvfabric checkout or installation)"
            )
        });
    let header = include.join("kvfabric.h");
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rerun-if-changed={}", include.join("kvfabric/codes.h").display());
    println!("cargo:rerun-if-changed={}", include.join("kvfabric/store_stats.h").display());
    println!("cargo:include={}", include.display());

    if linking {
        let lib_dir = env::var_os("KVFABRIC_LIB_DIR")
            .map(PathBuf::from)
            .or_else(|| library.as_ref().and_then(|l| l.link_paths.first().cloned()))
            .or_else(|| Some(checkout.join("build/src")).filter(|p| p.join("libkvfabric.so").exists()))
            .unwrap_or_else(|| {
                panic!(
                    "kvfabric-sys: libkvfabric.so not found; build kvfabric (make build) and set KVFABRIC_LIB_DIR to \
                     the directory that holds it (build/src), or PKG_CONFIG_PATH to one with kvfabric.pc; the \
                     no-link feature builds without it (cargo check, cargo doc)"
                )
            });
        if !Path::new(&lib_dir).join("libkvfabric.so").exists() {
            panic!("kvfabric-sys: {} holds no libkvfabric.so (KVFABRIC_LIB_DIR or kvfabric.pc)", lib_dir.display());
        }
        println!("cargo:rustc-link-search=native={}", lib_dir.display());
        println!("cargo:rustc-link-lib=dylib=kvfabric");
        println!("cargo:lib_dir={}", lib_dir.display());
    }

    let bindings = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_function("kvf_.*")
        .allowlist_type("kvf_.*")
        .allowlist_var("KVF_.*")
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(true)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("kvfabric-sys: bindgen could not read include/kvfabric.h (is libclang installed?)");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings.write_to_file(out.join("bindings.rs")).expect("kvfabric-sys: writing the bindings");
}
