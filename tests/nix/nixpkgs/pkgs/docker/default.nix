# Stand-in for pkgs.dockerTools.streamLayeredImage (pkgs/build-support/docker/default.nix, read
# in the Swarsel/nixpkgs fork at 4aa6836a648ca76c68866decf0c8965e36ec2a3b, about April 2026:
# NixOS/nixpkgs' stored copy, 34b7a306c35b279929eebbdb43af071fd92d0d4b, is from 2022 and lacks
# half the arguments), and
# the layering of pkgs/build-support/docker/auto-layer.nix (NixOS/nixpkgs
# 0628f2459067e3d3d788294260395b88ed74e43b), which streamLayeredImage uses when
# `layeringPipeline` is null, as dockerAutoLayer (pkgs/top-level/all-packages.nix callPackage of
# auto-layer.nix). The row in tests/nix/nixpkgs-attributes.json holds the arguments.
#
# Mirrored: the arguments (name, tag, fromImage, contents, config, architecture, created, mtime,
# uid, gid, uname, gname, maxLayers, extraCommands, fakeRootCommands, enableFakechroot,
# includeStorePaths, includeNixDB, passthru, meta, layeringPipeline, debug) and their defaults,
# the function made overridable (lib.makeOverridable);
# the result, a derivation named stream-<name> whose output is a program that writes a Docker
# image archive to stdout, with `imageName` and passthru `imageTag`, `isExe`, `conf`; the steps:
# a base JSON of the config, a customisation layer (`contents` joined as symlinkJoin does,
# `extraCommands` then `fakeRootCommands` run in it, packed as root-owned files with the fixed
# mtime, its sha256), the store layers of the closure of [ baseJson customisationLayer ] less
# those two, conf.json (store_dir, from_image, store_layers, customisation_layer, repo_tag,
# created and mtime as `date -Iseconds` writes them, uid/gid/uname/gname, config, architecture,
# os) and the stream script over it.
#
# Not mirrored, refused with a message: fromImage, layeringPipeline, enableFakechroot,
# includeNixDB, includeStorePaths = false. fakeroot is not here: fakeRootCommands run as the
# build user, and the layer is packed with owner and group 0, as fakeroot presents it. The
# layering: auto-layer.py gives every store path a layer of its own when the closure fits in
# maxLayers - 1 layers (each path then becomes a "primary" path), ordered by closure size; the
# stand-in computes that case only and refuses a larger closure. stream-layered-image.py (this
# folder) writes the archive: the same layout (manifest.json, the config, one layer.tar per
# layer), written here, not nixpkgs' stream_layered_image.py.
{
  lib,
  runCommand,
  writeText,
  python3,
}:
let
  dockerAutoLayer =
    {
      closureRoots,
      excludePaths ? [ ],
      maxLayers ? 100,
      fromImage ? null,
      debug ? false,
    }:
    assert lib.assertMsg (fromImage == null) "dockerAutoLayer stand-in: fromImage is not mirrored";
    # auto-layer.nix hands the graph over as structured attributes; the stand-in's builder reads
    # plain ones, so the graph comes as exportReferencesGraph's text files (one per root).
    runCommand "layers.json"
      {
        exportReferencesGraph = lib.concatLists (lib.imap0 (i: root: [ "graph${toString i}" root ]) closureRoots);
        inherit maxLayers;
        excludePaths = lib.concatMapStrings (x: x + "\n") excludePaths;
        nativeBuildInputs = [ python3 ];
      }
      ''
        # one layer (the customisation layer) is taken; at least one must remain
        python3 ${./auto-layer.py} $(( maxLayers - 1 )) graph* > $out
      '';

  streamLayeredImage = lib.makeOverridable (
    {
      name,
      tag ? null,
      fromImage ? null,
      contents ? [ ],
      config ? { },
      architecture ? "amd64",
      created ? "1970-01-01T00:00:01Z",
      mtime ? "1970-01-01T00:00:01Z",
      uid ? 0,
      gid ? 0,
      uname ? "root",
      gname ? "root",
      maxLayers ? 100,
      extraCommands ? "",
      fakeRootCommands ? "",
      enableFakechroot ? false,
      includeStorePaths ? true,
      includeNixDB ? false,
      passthru ? { },
      meta ? { },
      layeringPipeline ? null,
      debug ? false,
    }:
    assert lib.assertMsg (
      maxLayers > 1
    ) "the maxLayers argument of dockerTools.buildLayeredImage function must be greather than 1 (current value: ${toString maxLayers})";
    assert lib.assertMsg (
      fromImage == null && layeringPipeline == null && !enableFakechroot && !includeNixDB && includeStorePaths
    ) "dockerTools stand-in: fromImage, layeringPipeline, enableFakechroot, includeNixDB and includeStorePaths = false are not mirrored";
    let
      baseName = baseNameOf name;
      baseJson = writeText "${baseName}-base.json" (
        builtins.toJSON {
          inherit config architecture;
          os = "linux";
        }
      );
      contentsList = if builtins.isList contents then contents else [ contents ];
      customisationLayer = runCommand "${baseName}-customisation-layer" {
        paths = contentsList;
        inherit extraCommands fakeRootCommands mtime;
      } ''
        mkdir old_out
        for i in $paths; do
          if [ -d "$i" ]; then cp -rs --no-preserve=mode "$i"/. old_out/; fi
        done
        (cd old_out; eval "$extraCommands")
        mkdir $out
        (
          cd old_out
          eval "$fakeRootCommands"
          tar --sort name --numeric-owner --owner 0 --group 0 --mtime "$mtime" \
            --hard-dereference -cf $out/layer.tar .
        )
        sha256sum $out/layer.tar | cut -f 1 -d ' ' > $out/checksum
      '';
      closureRoots = [
        baseJson
        customisationLayer
      ];
      layers = dockerAutoLayer {
        inherit closureRoots maxLayers debug;
        excludePaths = closureRoots;
      };
      conf =
        runCommand "${baseName}-conf.json"
          {
            inherit created mtime;
            imageName = lib.toLower name;
            imageTag = if tag != null then tag else "";
            passthru.imageTag = if tag != null then tag else lib.head (lib.splitString "-" (baseNameOf conf.outPath));
            nativeBuildInputs = [ python3 ];
          }
          ''
            imageTag=''${imageTag:-$(basename "$out" | cut -d - -f 1)}
            # As nixpkgs: created and mtime in ISO 8601 with the offset (date -Iseconds), in the
            # build sandbox's time zone, UTC (set here: the stand-in may build without a sandbox).
            if [ "$created" != now ]; then created=$(TZ=UTC date -Iseconds -d "$created"); fi
            if [ "$mtime" != now ]; then mtime=$(TZ=UTC date -Iseconds -d "$mtime"); fi
            python3 - ${baseJson} ${layers} ${customisationLayer} "$imageName:$imageTag" > $out <<'EOF'
            import json, os, sys
            base, layers, customisation, repo_tag = sys.argv[1:]
            conf = json.load(open(base))
            conf.update(
                store_dir="${builtins.storeDir}", from_image=None, store_layers=json.load(open(layers)),
                customisation_layer=customisation, repo_tag=repo_tag, created=os.environ["created"],
                mtime=os.environ["mtime"], uid=${toString uid}, gid=${toString gid},
                uname="${uname}", gname="${gname}",
            )
            print(json.dumps(conf, indent=2))
            EOF
          '';
      result = runCommand "stream-${baseName}" {
        inherit (conf) imageName;
        passthru = passthru // {
          inherit (conf) imageTag;
          inherit conf;
          isExe = true;
        };
        inherit meta;
      } ''
        cat > $out <<EOS
        #!/bin/sh
        exec ${python3}/bin/python3 ${./stream-layered-image.py} ${conf} "\$@"
        EOS
        chmod +x $out
      '';
    in
    result
  );
in
{
  inherit streamLayeredImage dockerAutoLayer;
}
