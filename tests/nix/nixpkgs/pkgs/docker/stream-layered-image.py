"""The stand-in's stream script: conf.json (see default.nix) to a Docker image archive on stdout.

The layout `docker load` and `skopeo copy docker-archive:` read: one <digest>/layer.tar per layer (the
store layers, each holding its store paths under nix/store with their parent directories, owned by
conf's uid/gid, at conf's mtime; then the customisation layer as built), the config <digest>.json
(architecture, os, config, created, rootfs.diff_ids, history) and manifest.json. Written for this
stand-in, after the layout nixpkgs' stream_layered_image.py writes.
"""

import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
from datetime import UTC, datetime

conf = json.load(open(sys.argv[1]))


def parse_time(value: str) -> datetime:
    """conf's created or mtime: "now" or ISO 8601 (nixpkgs' stream_layered_image.py parse_time)."""
    return datetime.now(tz=UTC) if value == "now" else datetime.fromisoformat(value)


created = parse_time(conf["created"]).isoformat()
mtime = int(parse_time(conf["mtime"]).timestamp())


def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid, info.gid, info.uname, info.gname = conf["uid"], conf["gid"], conf["uname"], conf["gname"]
    info.mtime = mtime
    return info


def add_tree(tar: tarfile.TarFile, path: str) -> None:
    """A file, symlink or directory (and what it holds, by name), as it is in the store (symlinks kept)."""
    info = owned(tar.gettarinfo(path, arcname=path.lstrip("/")))
    if info.isreg():
        with open(path, "rb") as f:
            tar.addfile(info, f)
    else:
        tar.addfile(info)
    if info.isdir():
        for name in sorted(os.listdir(path)):
            add_tree(tar, os.path.join(path, name))


def store_layer(paths: list[str], into) -> None:
    with tarfile.open(fileobj=into, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("nix", "nix/store"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o555
            tar.addfile(owned(info))
        for path in sorted(paths):
            add_tree(tar, path)


def add(out: tarfile.TarFile, name: str, data) -> None:
    data.seek(0, os.SEEK_END)
    info = tarfile.TarInfo(name)
    info.size, info.mtime = data.tell(), mtime
    data.seek(0)
    out.addfile(info, data)


with tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.PAX_FORMAT) as out:
    diff_ids, layers, history = [], [], []
    blobs = [(paths, None) for paths in conf["store_layers"]] + [(None, conf["customisation_layer"] + "/layer.tar")]
    for paths, prebuilt in blobs:
        with tempfile.TemporaryFile() as layer:
            if prebuilt:
                with open(prebuilt, "rb") as f:
                    layer.write(f.read())
                comment = "customisation layer"
            else:
                store_layer(paths, layer)
                comment = "store paths: " + json.dumps(paths)
            layer.seek(0)
            digest = hashlib.sha256(layer.read()).hexdigest()
            print(f"Creating layer {len(layers) + 1} from {comment}", file=sys.stderr)
            add(out, f"{digest}/layer.tar", layer)
        diff_ids.append(f"sha256:{digest}")
        layers.append(f"{digest}/layer.tar")
        history.append({"created": created, "comment": comment})
    image = {
        "architecture": conf["architecture"],
        "os": conf["os"],
        "created": created,
        "config": conf["config"],
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": history,
    }
    config = json.dumps(image, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    add(out, config_name, io.BytesIO(config))
    manifest = [{"Config": config_name, "RepoTags": [conf["repo_tag"]], "Layers": layers}]
    add(out, "manifest.json", io.BytesIO(json.dumps(manifest).encode()))
print("Done.", file=sys.stderr)
