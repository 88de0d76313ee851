# Alert thresholds: their defaults, and the Prometheus recording rules that carry them.
#
# The alert rules (sglang-eagle3-alerts.yml) compare against series named
# sglang_eagle3:<threshold>, so the rule file is the same everywhere and only this small
# group changes with the settings; the dashboard draws the same series as lines.
# Builtins only: the NixOS module renders it, and the tests evaluate it without nixpkgs.
# sglang-eagle3-thresholds.yml is its rendering with the defaults (checked by the tests).
let
  # The users' measured single-stream decode speeds (shared with `bench compare`).
  reference = builtins.fromJSON (builtins.readFile ../../python/src/sglang_eagle3/bench/reference.json);
  baselines = map (run: run.tok_s) (builtins.filter (run: !run.speculative) reference.runs);
  best = builtins.foldl' (a: b: if b > a then b else a) 0 baselines;
in
{
  defaults = {
    # Accept length the draft reaches (tokens per verify step). Published for a Kimi-K2.5
    # EAGLE-3 draft at steps 3 / top-k 1 / draft tokens 4 on MT-Bench; replace it with the
    # `accept length` that `sglang-eagle3 bench run` measures on your traffic.
    draftAcceptLength = 2.69;
    # Alert when the accept length stays below this fraction of draftAcceptLength.
    acceptLengthMargin = 0.8;
    # Single-stream decode tok/s without speculation: the best baseline the users measured.
    baselineDecodeTokS = best;
    # Alert when per-request decode speed stays below this fraction of the baseline.
    decodeFloorMargin = 0.9;
    # The floor applies while at most this many requests run (the baseline is single-stream).
    decodeFloorMaxRunning = 1;
    # Alert when the KV cache is fuller than this fraction.
    kvCacheUsageMax = 0.9;
    # A queue shorter than this is not alarming, however it grows.
    queueMin = 5;
  };

  # The threshold series for the given settings (all attributes of `defaults`).
  rules = settings: {
    groups = [
      {
        name = "sglang-eagle3-thresholds";
        rules =
          map
            (threshold: {
              record = "sglang_eagle3:${threshold.name}";
              expr = "vector(${builtins.toJSON threshold.value})";
            })
            [
              {
                name = "accept_length_min";
                value = settings.draftAcceptLength * settings.acceptLengthMargin;
              }
              {
                name = "decode_tok_s_floor";
                value = settings.baselineDecodeTokS * settings.decodeFloorMargin;
              }
              {
                name = "decode_floor_max_running";
                value = settings.decodeFloorMaxRunning;
              }
              {
                name = "kv_cache_usage_max";
                value = settings.kvCacheUsageMax;
              }
              {
                name = "queue_min";
                value = settings.queueMin;
              }
            ];
      }
    ];
  };
}
