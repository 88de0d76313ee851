"""The OCI images (nix/image.nix): evaluated for the real stacks, built here from small parts, inspected, run.

The real stacks' images evaluate with the flake (their entrypoint, user, environment and labels are the
evaluated config). nixpkgs' builders cannot run here, so the images are also built around a stand-in stack
(nix/tests/image-stand-in.nix: each stack's pinned SGLang wheel patched by the real derivation, its
launch_server swapped for the stand-in server), with the same image code (nix/image.nix and
nix/scripts/image-root.sh) and the nixpkgs stand-in's streamLayeredImage (tests/nix/nixpkgs/pkgs/docker:
the real one's arguments, steps and archive layout; its own writer). Then, with Debian's skopeo and umoci:
the config (entrypoint, command, user, environment, labels, a fixed created); no key in any layer or in the
config, though one lies in the source tree; a patch change alters only the layers holding what the patch
touches; the two stacks' images share the rest; the root file system unpacked and its entrypoint run as the
image's user (tests/support/container.py) against the stand-in driver laid out as each toolkit mode lays it,
until the server is ready, and stopped with SIGTERM.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tarfile
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import CACHE, REPO
from support import container, driver_tree, pins
from support.bench_fixtures import free_port
from support.draft_fixtures import eagle3_draft_config, kimi_target, write_config, write_weights
from support.flake_eval import Workspace, needs_flake_eval
from support.pinned_wheels import fetch_wheel

SYSTEM = "x86_64-linux"
PROCESS = json.loads((REPO / "modules" / "server-process.json").read_text())
# The caches the lookup audit found (nix/runtime-env.json), each where its `unit` says: the state directory,
# the cache directory or a folder of it.
CACHE_ENV = {
    name: PROCESS["stateDirectory"] if c["unit"] == "state" else PROCESS["cacheDirectory"] + c["unit"][len("cache") :]
    for name, c in json.loads((REPO / "nix" / "runtime-env.json").read_text())["caches"].items()
}
VERSION = "0.1.0"  # python/pyproject.toml's, the images' version and the server image's tag prefix
STACKS = {"0.5.9": "sglang", "0.5.23": "sglang-0.5.23"}  # SGLang version -> its wheel's pin
pytestmark = needs_flake_eval()


def series(version: str) -> list[str]:
    from sglang_eagle3.trees import patchset

    return patchset.read_series(REPO / "patches" / f"sglang-{version}" / "series")


# -- the real stacks' images, evaluated ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("flake"))


@pytest.mark.parametrize(("attribute", "version"), [("image", "0.5.9"), ("image-0_5_23", "0.5.23")])
def test_each_stacks_image_evaluates_with_its_package_series_and_labels(ws, attribute, version):
    image = f"packages.{SYSTEM}.{attribute}"
    assert ws.eval(f"{image}.name") == "stream-sglang-eagle3"
    assert_content_tag(ws, image)
    config = ws.eval(f"{image}.passthru.config")
    package = "default" if version == "0.5.9" else f"sglang-eagle3-{version.replace('.', '_')}"
    exe = ws.eval(f"packages.{SYSTEM}.{package}", apply='p: p.outPath + "/bin/sglang-eagle3"')
    assert config["Entrypoint"] == [exe, "serve"] and config["Cmd"] == ["--config", PROCESS["settingsFile"]]
    assert config["User"] == "1000:1000" and config["WorkingDir"] == PROCESS["stateDirectory"]
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env == {**CACHE_ENV, "PATH": "/bin:/usr/bin:/usr/local/nvidia/bin",
                   "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}  # fmt: skip
    labels = config["Labels"]
    assert labels["sglang-eagle3.sglang-version"] == version
    assert labels["sglang-eagle3.patch-series"].split() == series(version)
    assert labels["org.opencontainers.image.revision"] == "unknown"  # a path: flake has neither rev nor dirtyRev
    assert ws.eval(f"{image}.drvPath").endswith(".drv"), "the whole image derivation evaluates"
    # the name the Kubernetes manifests give it (its tag is set there by kustomize `images:`)
    if version == "0.5.9":
        server = (REPO / "kubernetes" / "one-node" / "server.yaml").read_text()
        assert "image: sglang-eagle3:unset-sglang-0.5.9-set-by-kustomize-images" in server


def test_the_image_derivation_calls_the_tested_root_script(ws):
    """The customisation layer's extraCommands run nix/scripts/image-root.sh (tests/test_build_scripts.py runs it)."""
    closure = json.loads(ws.nix("derivation", "show", "--recursive", f"{ws.ref}#packages.{SYSTEM}.image").stdout)
    (layer,) = [d for d in closure.values() if d["name"] == "sglang-eagle3-customisation-layer"]
    commands = " ".join(layer["env"]["extraCommands"].replace("\\\n", " ").split())
    call = (
        r"bash /nix/store/\w{32}-image-root\.sh 1000 /var/lib/sglang-eagle3 /nix/store/\w{32}-glibc-"
        r"[\w.-]+/bin/ldconfig /var/lib/sglang-eagle3,/var/cache/sglang-eagle3 -- .*"
        r"/nix/store/\w{32}-sglang-eagle3-0\.1\.0/bin/sglang-eagle3$"
    )
    assert re.search(call, commands), commands


def test_the_router_image_runs_the_router_launcher(ws):
    image = f"packages.{SYSTEM}.router-image"
    config = ws.eval(f"{image}.passthru.config")
    router = ws.eval(f"packages.{SYSTEM}.sglang-router", apply='p: p.outPath + "/bin/sglang-eagle3-router"')
    assert config["Entrypoint"] == [router] and config["User"] == "1000:1000"
    assert_content_tag(ws, image)
    router_yaml = (REPO / "kubernetes" / "one-node" / "router.yaml").read_text()
    assert "image: sglang-eagle3-router:unset-set-by-kustomize-images" in router_yaml


def assert_content_tag(ws: Workspace, image: str) -> None:
    """nix/image.nix gives no tag: streamLayeredImage tags the image by the hash of its conf.json, which names every
    layer and the config, so the tag changes whenever the content does."""
    tag = ws.eval(f"{image}.imageTag")
    assert re.fullmatch(r"[0-9a-df-np-sv-z]{32}", tag), tag
    assert ws.eval(f"{image}.passthru.conf.outPath").split("/")[-1].startswith(tag + "-")


# -- the same image code around a stand-in stack, built here -------------------------------------------------


class Image:
    """A built stand-in image: its stream program, the archive it writes, and conf.json's store layers."""

    def __init__(self, stream: Path, archive: Path):
        self.stream, self.archive = stream, archive
        conf = re.search(r"/nix/store/\w{32}-[\w.-]+-conf\.json", stream.read_text()).group(0)
        self.store_layers = json.loads(Path(conf).read_text())["store_layers"]
        with tarfile.open(archive) as tar:
            self.manifest = json.load(tar.extractfile("manifest.json"))[0]
            self.config_bytes = tar.extractfile(self.manifest["Config"]).read()
            self.layers = {name: tar.extractfile(name).read() for name in self.manifest["Layers"]}

    def layer_names(self) -> list[str]:
        """Each layer by what it holds: its store paths' names (no hash), then "customisation"."""
        return [" ".join(p.split("-", 1)[1] for p in paths) for paths in self.store_layers] + ["customisation"]

    def by_name(self) -> dict[str, tuple[str, int]]:
        """layer name -> (digest, size)."""
        return {n: (d, len(self.layers[d])) for n, d in zip(self.layer_names(), self.manifest["Layers"], strict=True)}


def build_stand_in(ws: Workspace, version: str, into: Path) -> Image:
    expr = (f'let flake = builtins.getFlake "{ws.ref}"; pkgs = flake.inputs.nixpkgs.legacyPackages.{SYSTEM}; in '
            f'(import "${{flake}}/nix/tests/image-stand-in.nix" {{ inherit pkgs; inherit (pkgs) lib; '
            f'version = "{version}"; }}).server')  # fmt: skip
    out = ws.nix("build", "--impure", "--no-link", "--print-out-paths", "--option", "sandbox", "false", "--expr", expr)
    stream = Path(out.stdout.strip())
    into.mkdir(parents=True, exist_ok=True)
    archive = into / "image.tar"
    with archive.open("wb") as f:
        subprocess.run([str(stream)], stdout=f, stderr=subprocess.DEVNULL, check=True)
    return Image(stream, archive)


@pytest.fixture(scope="module")
def key() -> str:
    return "sk-image-" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def images(ws, key, tmp_path_factory) -> dict[str, Image]:
    """The stand-in images of both stacks, and of 0.5.9 again after a change to one of its patches; built with a
    key lying in the source tree, as a careless checkout would have one."""
    (ws.flake / "api-key").write_text(key)
    for pin_name in STACKS.values():
        pin = pins.pins()[pin_name]
        named = tmp_path_factory.mktemp("wheel") / pin["wheel"]
        shutil.copy(fetch_wheel(pin_name, CACHE, package="sglang"), named)
        ws.nix("store", "add-file", str(named))
    root = tmp_path_factory.mktemp("images")
    built = {version: build_stand_in(ws, version, root / version) for version in STACKS}
    # A revised patch: its description changes, its diff does not (it still applies with no fuzz).
    patch = ws.flake / "patches" / "sglang-0.5.9" / series("0.5.9")[0]
    patch.write_text("Revised description (tests/test_image.py).\n\n" + patch.read_text())
    built["0.5.9-revised"] = build_stand_in(ws, "0.5.9", root / "revised")
    return built


def test_the_image_config_is_the_servers(images):
    image = images["0.5.9"]
    config = json.loads(image.config_bytes)
    # nix/image.nix passes 1970-01-01T00:00:01Z; streamLayeredImage writes it as `date -Iseconds` does
    assert config["created"] == "1970-01-01T00:00:01+00:00" and config["architecture"] == "amd64"
    c = config["config"]
    assert re.fullmatch(
        r"/nix/store/\w{32}-sglang-eagle3-stand-in-sglang-0\.5\.9/bin/sglang-eagle3", c["Entrypoint"][0]
    )
    assert c["Entrypoint"][1:] == ["serve"] and c["Cmd"] == ["--config", PROCESS["settingsFile"]]
    assert c["User"] == "1000:1000"
    assert dict(e.split("=", 1) for e in c["Env"])["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert c["Labels"]["sglang-eagle3.patch-series"].split() == series("0.5.9")
    # skopeo reads the archive the same way
    inspected = json.loads(subprocess.run(["skopeo", "inspect", "--config", f"docker-archive:{image.archive}"],
                                          capture_output=True, text=True, check=True).stdout)  # fmt: skip
    assert inspected["config"] == c


def customisation(image: Image) -> tuple[dict[str, tarfile.TarInfo], dict[str, bytes]]:
    """The customisation layer's members by path, and its regular files' contents."""
    with tarfile.open(fileobj=io.BytesIO(image.layers[image.manifest["Layers"][-1]])) as tar:
        members = {m.name.removeprefix("./"): m for m in tar.getmembers()}
        return members, {name: tar.extractfile(m).read() for name, m in members.items() if m.isreg()}


def test_the_image_root_has_the_user_ldconfig_and_writable_directories(images):
    members, files = customisation(images["0.5.9"])
    assert b"sglang:x:1000:1000:sglang-eagle3:/var/lib/sglang-eagle3:" in files["etc/passwd"]
    assert all(m.uid == 0 and m.gid == 0 for m in members.values()), "root-owned, as fakeroot packs it"
    assert members["sbin/ldconfig"].issym() and members["sbin/ldconfig"].linkname.endswith("/bin/ldconfig")
    assert members["etc/ld.so.conf.d"].isdir() and files["etc/ld.so.conf"] == b"include /etc/ld.so.conf.d/*.conf\n"
    for directory in ("tmp", PROCESS["stateDirectory"].lstrip("/"), PROCESS["cacheDirectory"].lstrip("/")):
        assert members[directory].mode & 0o7777 == 0o1777, directory
    for program in ("sh", "awk", "install", "sglang-eagle3"):
        assert members[f"bin/{program}"].issym(), program


def test_no_key_in_any_layer_or_in_the_config(images, key):
    for name, image in images.items():
        assert key.encode() not in image.config_bytes, name
        for digest, blob in image.layers.items():
            assert key.encode() not in blob, f"{name}: the key is in layer {digest}"
            with tarfile.open(fileobj=io.BytesIO(blob)) as t:
                # no key file either (the credential's name; the one lying in the source tree)
                assert not [m.name for m in t.getmembers() if Path(m.name).name == "api-key"], f"{name}: {digest}"
        env = json.loads(image.config_bytes)["config"]["Env"]
        assert not [e for e in env if re.search(r"KEY|TOKEN|SECRET|PASSWORD", e.split("=")[0])], env


def test_the_image_is_the_same_bytes_when_streamed_again(images, tmp_path):
    again = tmp_path / "again.tar"
    with again.open("wb") as f:
        subprocess.run([str(images["0.5.9"].stream)], stdout=f, stderr=subprocess.DEVNULL, check=True)
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    assert digest(again) == digest(images["0.5.9"].archive)


# What a patch change reaches in the stand-in stack, as in the real one: the series' own directory, SGLang
# patched, the wrapper that names both (the real stack: the patched SGLang package, sglang-eagle3 with its copy
# of the patches, the environment, the wrapper), and the customisation layer whose links name the wrapper.
TOUCHED_BY_A_PATCH = {"sglang-0.5.9", "sglang-0.5.9-stand-in", "sglang-eagle3-stand-in-sglang-0.5.9", "customisation"}


def shared_bytes(a: Image, b: Image) -> tuple[int, int]:
    """(bytes of b's layers a has too, bytes of b's layers)."""
    have = set(a.layers)
    return sum(len(v) for d, v in b.layers.items() if d in have), sum(len(v) for v in b.layers.values())


def test_a_patch_change_rebuilds_only_the_layers_it_touches(images):
    before, after = images["0.5.9"].by_name(), images["0.5.9-revised"].by_name()
    assert list(before) == list(after), "the same layers, in the same order"
    changed = {name for name in before if before[name][0] != after[name][0]}
    assert changed == TOUCHED_BY_A_PATCH
    # and the image's tag changes with them (nix/image.nix: the content's hash), so nodes pull the new image
    tags = [image.manifest["RepoTags"] for image in (images["0.5.9"], images["0.5.9-revised"])]
    assert tags[0] != tags[1] and all(t[0].startswith("sglang-eagle3:") for t in tags), tags
    shared, total = shared_bytes(images["0.5.9"], images["0.5.9-revised"])
    print(f"\nstand-in image, two patch revisions: {shared} of {total} bytes shared ({shared / total:.0%})")


def test_the_two_stacks_images_share_everything_but_their_sglang(images):
    a, b = images["0.5.9"].by_name(), images["0.5.23"].by_name()
    common = {name for name in a if name in b and a[name][0] == b[name][0]}
    assert common == {"host-driver.sh", "bash-5.3", "gawk-5.3.2", "glibc-2.40-66-bin", "python3-3.12.12-env",
                      "coreutils-9.8", "sglang-eagle3-src"}  # fmt: skip
    shared, total = shared_bytes(images["0.5.9"], images["0.5.23"])
    print(f"\nstand-in images, 0.5.9 and 0.5.23: {shared} of {total} bytes shared")


# -- run: the entrypoint in the image's root, the stand-in driver as each toolkit mode mounts it ----------------


@pytest.fixture(scope="module")
def unpacked(images, tmp_path_factory):
    why = container.unavailable()
    if why:
        pytest.skip(why)
    return container.unpack(images["0.5.9"].archive, tmp_path_factory.mktemp("unpacked"))


@pytest.fixture(scope="module")
def pod_files(tmp_path_factory) -> dict[str, Path]:
    """What the pod mounts: the one-node ConfigMap's settings (on a free port), the fetched weights (tiny
    Kimi-K2.5-shaped target and EAGLE-3 draft at the lock's directories), the Secret with the key."""
    root = tmp_path_factory.mktemp("pod")
    server = (REPO / "kubernetes" / "one-node" / "server.yaml").read_text()
    import yaml

    configmap = next(d for d in yaml.safe_load_all(server) if d["kind"] == "ConfigMap")
    values = json.loads(configmap["data"]["settings.json"])
    values["port"] = free_port()
    (root / "settings").mkdir()
    (root / "settings" / "settings.json").write_text(json.dumps(values))
    models = root / "models"
    kimi_target(Path(values["model_path"].replace(PROCESS["modelsDirectory"], str(models))))
    draft = Path(values["speculative_draft_model_path"].replace(PROCESS["modelsDirectory"], str(models)))
    write_config(draft, eagle3_draft_config((1, 29, 57), draft_vocab=32000))
    write_weights(draft, d2t_rows=32000)
    (root / "secret").mkdir()
    (root / "secret" / "api-key").write_text("sk-pod-" + secrets.token_hex(8))
    os.chown(root / "secret" / "api-key", 0, 1000)  # as Kubernetes mounts a Secret with fsGroup 1000
    (root / "secret" / "api-key").chmod(0o440)
    for path in [root, *root.rglob("*")]:  # readable by the image's user, as the volumes are
        if path.name != "api-key":
            path.chmod(path.stat().st_mode | (0o005 if path.is_dir() else 0o004))
    return {"root": root, "settings": root / "settings", "models": models, "port": values["port"]}


WRITABLE = [PROCESS["stateDirectory"], PROCESS["cacheDirectory"]]


def run_in_image(unpacked, pod_files, work: Path, mode: str, extra_binds=None, **start):
    rootfs, spec, _ = unpacked
    drivers = driver_tree.build_driver(work / "libs")
    driver_tree.lay_out(work / "driver", mode, drivers)
    for path in [work, *work.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | (0o005 if path.is_dir() else 0o004))
    binds = {str(Path(PROCESS["settingsFile"]).parent): pod_files["settings"],
             PROCESS["modelsDirectory"]: pod_files["models"], **(extra_binds or {})}  # fmt: skip
    return container.start(rootfs, spec, work / "run", WRITABLE, binds, driver=work / "driver", **start)


def finish(process: subprocess.Popen, timeout: float = 300) -> str:
    try:
        out, _ = process.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return out


@pytest.mark.parametrize("mode", [m for m in driver_tree.MODES if m != "cdi-nixos"])
def test_preflight_in_the_container_finds_the_driver_each_toolkit_mode_mounts(unpacked, pod_files, tmp_path, mode):
    process = run_in_image(unpacked, pod_files, tmp_path, mode,
                           args=["serve", "--config", PROCESS["settingsFile"], "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    out = finish(process)
    findings = {f["name"]: f for f in json.loads(out)["preflight"]["findings"]}
    assert findings["gpus"]["status"] == "ok", findings["gpus"]
    if mode == "utility":
        assert findings["driver"]["status"] == "fail" and process.returncode == 1
        assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in findings["driver"]["message"]
    else:
        assert findings["driver"]["status"] == "ok", findings["driver"]
        assert process.returncode == 0, out


def test_the_entrypoint_serves_until_stopped_nixos_cdi(unpacked, pod_files, tmp_path):
    """The image's own entrypoint and command, as a pod runs it: preflight (the driver through NixOS's
    /run/opengl-driver), the stand-in server started, /health_generate answering, SIGTERM: a clean stop."""
    log = tmp_path / "log"
    with log.open("w") as out:
        process = run_in_image(unpacked, pod_files, tmp_path, "cdi-nixos", stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{pod_files['port']}/health_generate"
    try:
        deadline = time.monotonic() + 240
        while process.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        assert process.poll() is None, log.read_text()[-4000:]
        wait = time.monotonic() + 60
        while "ready: " not in log.read_text() and time.monotonic() < wait:
            time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0, log.read_text()[-4000:]
    finally:
        finish(process, timeout=10)
    text = log.read_text()
    assert "[ OK ] driver: runs CUDA up to 13.0" in text and "/run/opengl-driver/lib/libcuda.so" in text
    assert f"ready: {url}" in text and "stopped by SIGTERM" in text


def test_the_credential_is_copied_private_and_read_from_credentials_directory(unpacked, pod_files, tmp_path):
    """The manifests' credentials init container (`install -m 0400`, the Secret mounted group-readable), then the
    server's: the launcher takes the key from $CREDENTIALS_DIRECTORY/api-key, as under systemd."""
    import yaml

    server = next(d for d in yaml.safe_load_all((REPO / "kubernetes/one-node/server.yaml").read_text())
                  if d["kind"] == "StatefulSet")  # fmt: skip
    init = next(c for c in server["spec"]["template"]["spec"]["initContainers"] if c["name"] == "credentials")
    credentials = tmp_path / "credentials"
    credentials.mkdir(mode=0o1777)
    credentials.chmod(0o1777)
    copy = run_in_image(unpacked, pod_files, tmp_path / "init", "legacy", command=init["command"],
                        extra_binds={"/run/secrets/sglang-eagle3": pod_files["root"] / "secret"},
                        shared={"/run/credentials/sglang-eagle3": credentials},
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    out = finish(copy)
    assert copy.returncode == 0, out
    copied = credentials / "api-key"
    assert copied.read_text() == (pod_files["root"] / "secret" / "api-key").read_text()
    assert copied.stat().st_uid == 1000 and copied.stat().st_mode & 0o777 == 0o400
    env = {"CREDENTIALS_DIRECTORY": "/run/credentials/sglang-eagle3"}
    dry = run_in_image(unpacked, pod_files, tmp_path / "server", "legacy",
                       args=["serve", "--config", PROCESS["settingsFile"], "--json"], env=env,
                       shared={"/run/credentials/sglang-eagle3": credentials},
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    plan = json.loads(finish(dry))
    findings = {f["name"]: f for f in plan["preflight"]["findings"]}
    assert findings["api key"]["status"] == "ok", findings["api key"]
    assert plan["env"]["SGLANG_EAGLE3_API_KEY_FILE"] == "/run/credentials/sglang-eagle3/api-key"
    assert plan["argv"][1:3] == ["-m", "sglang_eagle3.serving.sglang_main"]
    assert copied.read_text() not in json.dumps(plan)
