# SPDX-License-Identifier: GPL-2.0-or-later
#
# cannoli with Nix: the patched QEMU and the Rust workspace.
#
#   nix build .#qemu-cannoli   # QEMU 10.0.13 linux-user (the guests of
#                              # scripts/build-qemu.sh) with
#                              # qemu_patches.patch, configured --with-cannoli,
#                              # plus QEMU's own plugins for the exactness tests
#   nix build .#qemu-plain     # the same source without --with-cannoli
#   nix build                  # the workspace: symbolizer, benchmark, ...,
#                              # wrapped to find qemu-cannoli by themselves
#   nix develop                # Rust, the mipsel/riscv64 cross compilers and
#                              # CANNOLI_QEMU_BUILD/PLAIN for the e2e tests
#
# Not exercised by CI: the project's machines cannot fetch from the Nix
# caches, so the tests only check that this file parses
# (e2e/tests/flake.rs, `nix-instantiate --parse flake.nix`). The scripts in
# scripts/ are the tested way to build.
{
  description = "cannoli: a high-performance execution tracer on a patched QEMU 10.0 linux-user";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.05";
    # The upstream release tarball; `nix flake lock` records its hash.
    qemu-src = {
      url = "https://download.qemu.org/qemu-10.0.13.tar.xz";
      flake = false;
    };
  };

  outputs = { self, nixpkgs, qemu-src }:
    let
      lib = nixpkgs.lib;
      # The patch splices x86-64 code into QEMU's JIT: x86-64 hosts only.
      systems = [ "x86_64-linux" ];
      forAllSystems = f: lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});

      qemuVersion = "10.0.13";
      # The guests scripts/build-qemu.sh builds: the default of its
      # CANNOLI_QEMU_TARGETS, read from the script so that both stay in step.
      guestArches =
        let
          lines = builtins.filter builtins.isString
            (builtins.split "\n" (builtins.readFile ./scripts/build-qemu.sh));
          found = builtins.filter (m: m != null)
            (map (builtins.match "targets=[$][{]CANNOLI_QEMU_TARGETS:-([^}]*)[}].*") lines);
          targets = builtins.filter builtins.isString
            (builtins.split "," (builtins.head (builtins.head found)));
        in
        map (t: builtins.head (builtins.match "(.*)-linux-user" t)) targets;
      # QEMU's own plugins it builds for the tests' ground truth (its
      # `plugins=(...)`), likewise.
      groundTruthPlugins =
        let
          m = builtins.match ".*plugins=[(]([^)]*)[)].*" (builtins.readFile ./scripts/build-qemu.sh);
        in
        builtins.filter (w: builtins.isString w && w != "")
          (builtins.split "[[:space:]]+" (builtins.head m));

      mkQemu = pkgs: { withCannoli }:
        let
          # --with-cannoli=DIR wants DIR/include/cannoli.h.
          cannoliHeaders = pkgs.runCommand "cannoli-include" { } ''
            mkdir -p $out/include
            cp ${./include/cannoli.h} $out/include/cannoli.h
          '';
          python = pkgs.python3.withPackages (ps: [ ps.distlib ]);
          bins = map (a: "qemu-${a}") guestArches;
          plugins = lib.optionals withCannoli groundTruthPlugins;
        in
        pkgs.stdenv.mkDerivation {
          pname = if withCannoli then "qemu-cannoli" else "qemu-cannoli-plain";
          version = qemuVersion;
          src = qemu-src;
          patches = [ ./qemu_patches.patch ];

          nativeBuildInputs = [ pkgs.pkg-config pkgs.flex pkgs.bison pkgs.meson pkgs.ninja pkgs.perl python ];
          buildInputs = [ pkgs.glib pkgs.zlib ];

          # QEMU's configure drives meson itself.
          dontUseMesonConfigure = true;
          dontUseNinjaBuild = true;
          dontUseNinjaInstall = true;

          postPatch = ''
            patchShebangs .
          '';

          # The flags of scripts/build-qemu.sh (conf_common), offline.
          configurePhase = ''
            runHook preConfigure
            mkdir build && cd build
            ../configure \
              --prefix=$out \
              --target-list=${lib.concatMapStringsSep "," (a: "${a}-linux-user") guestArches} \
              --disable-system --disable-tools --disable-docs --disable-werror \
              --disable-install-blobs --disable-debug-info --enable-plugins \
              --disable-download \
              --python=${python}/bin/python3 \
              ${lib.optionalString withCannoli "--with-cannoli=${cannoliHeaders}"}
            runHook postConfigure
          '';

          buildPhase = ''
            runHook preBuild
            ninja -j$NIX_BUILD_CORES ${lib.concatStringsSep " " (bins ++ plugins)}
            runHook postBuild
          '';

          # The layout of a build directory (what CANNOLI_QEMU_BUILD and
          # CANNOLI_QEMU_PLAIN point at), plus bin/.
          installPhase = ''
            runHook preInstall
            mkdir -p $out/bin
            for b in ${lib.concatStringsSep " " bins}; do
              install -m755 $b $out/$b
              ln -s ../$b $out/bin/$b
            done
            for p in ${lib.concatStringsSep " " plugins}; do
              install -D -m755 $p $out/$p
            done
            runHook postInstall
          '';

          meta = {
            description = "QEMU ${qemuVersion} linux-user with the cannoli patch"
              + lib.optionalString (!withCannoli) " (configured without cannoli)";
            license = lib.licenses.gpl2Plus;
            platforms = systems;
          };
        };

      # Cross compilers named like Debian's (build-guests.sh calls
      # mipsel-linux-gnu-gcc), linking static glibc.
      crossGcc = pkgs: { debianTriple, cross }:
        pkgs.writeShellScriptBin "${debianTriple}-gcc" ''
          exec ${cross.stdenv.cc}/bin/${cross.stdenv.cc.targetPrefix}gcc \
            -L${cross.glibc.static}/lib "$@"
        '';
    in
    {
      packages = forAllSystems (pkgs:
        let
          qemu-cannoli = mkQemu pkgs { withCannoli = true; };
          qemu-plain = mkQemu pkgs { withCannoli = false; };
          cannoli = pkgs.rustPlatform.buildRustPackage {
            pname = "cannoli";
            version = (lib.importTOML ./Cargo.toml).workspace.package.version;
            src = lib.cleanSource ./.;
            cargoLock.lockFile = ./Cargo.lock;
            cargoBuildFlags = [ "--workspace" ];
            # The unit tests run with `cargo test`; the end-to-end tests need
            # the QEMU builds and the cross-compiled guests (nix develop).
            doCheck = false;
            nativeBuildInputs = [ pkgs.makeWrapper ];
            # The hook libraries land in $out/lib, where the launcher looks
            # (next to the executable, then ../lib); QEMU comes from the flake.
            postInstall = ''
              for b in $out/bin/*; do
                wrapProgram $b --set-default CANNOLI_QEMU_DIR ${qemu-cannoli}/bin
              done
            '';
            meta = {
              description = "cannoli execution tracer: client library, launcher and example tools";
              license = lib.licenses.gpl2Plus;
              platforms = systems;
              mainProgram = "symbolizer";
            };
          };
        in
        {
          inherit qemu-cannoli qemu-plain cannoli;
          default = cannoli;
        });

      devShells = forAllSystems (pkgs:
        let
          p = self.packages.${pkgs.stdenv.hostPlatform.system};
        in
        {
          default = pkgs.mkShell {
            packages = [
              pkgs.cargo
              pkgs.rustc
              pkgs.clippy
              pkgs.rustfmt
              pkgs.gcc
              pkgs.go
              pkgs.nix
              (crossGcc pkgs { debianTriple = "mipsel-linux-gnu"; cross = pkgs.pkgsCross.mipsel-linux-gnu; })
              (crossGcc pkgs { debianTriple = "riscv64-linux-gnu"; cross = pkgs.pkgsCross.riscv64; })
            ];
            # What scripts/build-qemu.sh writes to target/qemu.env.
            CANNOLI_QEMU_VERSION = qemuVersion;
            CANNOLI_QEMU_BUILD = "${p.qemu-cannoli}";
            CANNOLI_QEMU_PLAIN = "${p.qemu-plain}";
            shellHook = ''
              echo "cannoli: bash scripts/build-guests.sh && cargo test --release --workspace"
            '';
          };
        });
    };
}
