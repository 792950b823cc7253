"""The public serving runs the serving simulator is validated against (serving/data/) and the
scorer of benchmarks/serve_validation.py."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from krakenlm.serving.validation import (
    PREFIX_BLOCK_TOKENS,
    RUNS_FILE,
    WARM_GAP_S,
    ValidationDataError,
    load_runs,
    medians,
    replay_run,
    run_trace,
    score,
)

# the sums the source's JSON files print (total_input_tokens, total_output_tokens)
SOURCE_TOTALS = {"llmk8s-a100-tp8-qps-01": 42722, "llmk8s-a100-tp8-qps-04": 42449,
                 "llmk8s-a100-tp8-qps-16": 42770, "llmk8s-a100-tp8-qps-inf": 42398}
# datacrunch: (random input, random output, prompts, total_input_tokens, total_output_tokens)
# of each line of the source's jsonl files
DATACRUNCH = {
    "qps-01": (1024, 1024, 300, 152612, 160347), "qps-02": (1024, 1024, 600, 308748, 308712),
    "qps-04": (1024, 1024, 1200, 615860, 607936),
    "qps-08": (1024, 1024, 2400, 1222995, 1218922),
    "qps-16": (1024, 1024, 3200, 1629242, 1642637),
    "inf-1024-1024-n3000": (1024, 1024, 3000, 1525074, 1544818),
    "inf-1024-512-n4000": (1024, 512, 4000, 2034177, 1029594),
    "inf-4096-2048-n800": (4096, 2048, 800, 1637669, 818620),
    "inf-4096-1024-n1500-a": (4096, 1024, 1500, 3097487, 760205),
    "inf-4096-1024-n1500-b": (4096, 1024, 1500, 3097487, 760205),
    "inf-256-512-n6000": (256, 512, 6000, 777987, 1529561)}

# lambda: (total_input_tokens, total_output_tokens, requests that returned no token) printed
# by each result file
LAMBDA = {"lambda-h100-tp1-mistral7b-inf-n10": (1585, 2490, 1),
          "lambda-h100-tp1-mistral7b-inf-n20": (3438, 4916, 1),
          "lambda-h100-tp1-mistral7b-inf-n160": (37741, 34013, 14),
          "lambda-h100-tp2-mistral7b-inf-n10": (1585, 2416, 1),
          "lambda-h100-tp2-mistral7b-inf-n20": (3438, 4745, 1),
          "lambda-h100-tp2-mistral7b-inf-n160": (37741, 34170, 14),
          "lambda-h100-tp4-mistral7b-inf-n10": (1585, 2407, 1),
          "lambda-h100-tp4-mistral7b-inf-n160": (37741, 33925, 14),
          "lambda-h100-tp8-mistral7b-inf-n10": (1585, 2584, 1),
          "lambda-h100-tp8-mistral7b-inf-n160": (37741, 34252, 14),
          "lambda-a100-tp1-mistral7b-inf-n10": (1585, 2566, 1),
          "lambda-a100-tp1-mistral7b-inf-n160": (37741, 34049, 14),
          "lambda-a100-tp2-mistral7b-inf-n10": (1585, 2444, 1),
          "lambda-a100-tp2-mistral7b-inf-n20": (3438, 4919, 1),
          "lambda-a100-tp2-mistral7b-inf-n160": (37741, 34226, 14),
          "lambda-a100-tp4-mistral7b-inf-n10": (1585, 2483, 1),
          "lambda-a100-tp4-mistral7b-inf-n160": (37741, 34058, 14),
          "lambda-a100-tp8-mistral7b-inf-n20": (3438, 4912, 1),
          "lambda-a100-tp8-mistral7b-inf-n160": (37741, 34261, 14),
          # the 40- and 80-prompt runs of August 2024 (stop 53)
          "lambda-h100-tp1-mistral7b-inf-n40": (9349, 8987, 2),
          "lambda-h100-tp1-mistral7b-inf-n80": (21713, 16102, 6),
          "lambda-h100-tp2-mistral7b-inf-n40": (9349, 8965, 2),
          "lambda-h100-tp4-mistral7b-inf-n40": (9349, 8991, 2),
          "lambda-h100-tp4-mistral7b-inf-n80": (21713, 15901, 6),
          "lambda-h100-tp8-mistral7b-inf-n40": (9349, 9028, 2),
          "lambda-h100-tp8-mistral7b-inf-n80": (21713, 16151, 6),
          "lambda-a100-tp1-mistral7b-inf-n80": (21713, 16099, 6),
          "lambda-a100-tp2-mistral7b-inf-n40": (9349, 9026, 2),
          "lambda-a100-tp4-mistral7b-inf-n40": (9349, 9023, 2),
          "lambda-a100-tp4-mistral7b-inf-n80": (21713, 16016, 6),
          "lambda-a100-tp8-mistral7b-inf-n40": (9349, 9044, 2),
          "lambda-a100-tp8-mistral7b-inf-n80": (21713, 16164, 6)}


# lambda_v060: the September 2024 files (vLLM 0.6.0, --num-scheduler-steps 10): id -> the
# printed total_input_tokens, total_output_tokens and the requests that returned no token
LAMBDA_V060 = {
    "lambda-v060-h100-tp1-llama3-8b-inf-n10": (1369, 1867, 0),
    "lambda-v060-h100-tp1-llama3-8b-inf-n20": (3590, 3876, 0),
    "lambda-v060-h100-tp1-llama3-8b-inf-n160": (34050, 32114, 8),
    "lambda-v060-h100-tp2-llama3-8b-inf-n10": (1369, 1948, 0),
    "lambda-v060-h100-tp2-llama3-8b-inf-n20": (3590, 3989, 0),
    "lambda-v060-h100-tp2-llama3-8b-inf-n160": (34050, 31738, 8),
    "lambda-v060-h100-tp4-llama3-8b-inf-n10": (1369, 1852, 0),
    "lambda-v060-h100-tp4-llama3-8b-inf-n20": (3590, 3869, 0),
    "lambda-v060-h100-tp4-llama3-8b-inf-n160": (34050, 32006, 7),
    "lambda-v060-h100-tp8-llama3-8b-inf-n10": (1369, 1863, 0),
    "lambda-v060-h100-tp8-llama3-8b-inf-n20": (3590, 3920, 0),
    "lambda-v060-h100-tp8-llama3-8b-inf-n160": (34050, 32132, 8),
    "lambda-v060-h100-tp1-mistral7b-inf-n10": (1585, 2483, 1),
    "lambda-v060-h100-tp1-mistral7b-inf-n20": (3438, 4892, 1),
    "lambda-v060-h100-tp1-mistral7b-inf-n160": (37741, 34120, 14),
    "lambda-v060-h100-tp2-mistral7b-inf-n10": (1585, 2289, 1),
    "lambda-v060-h100-tp2-mistral7b-inf-n20": (3438, 4757, 1),
    "lambda-v060-h100-tp2-mistral7b-inf-n160": (37741, 34259, 14),
    "lambda-v060-h100-tp4-mistral7b-inf-n10": (1585, 2483, 1),
    "lambda-v060-h100-tp4-mistral7b-inf-n20": (3438, 4857, 1),
    "lambda-v060-h100-tp4-mistral7b-inf-n160": (37741, 34152, 14),
    "lambda-v060-h100-tp8-mistral7b-inf-n10": (1585, 2532, 1),
    "lambda-v060-h100-tp8-mistral7b-inf-n20": (3438, 4911, 1),
    "lambda-v060-h100-tp8-mistral7b-inf-n160": (37741, 34154, 14),
    "lambda-v060-h100-tp2-llama3-70b-inf-n10": (1369, 2091, 2),
    "lambda-v060-h100-tp2-llama3-70b-inf-n20": (3590, 4137, 3),
    "lambda-v060-h100-tp4-llama3-70b-inf-n10": (1369, 2091, 2),
    "lambda-v060-h100-tp4-llama3-70b-inf-n20": (3590, 4036, 3),
    "lambda-v060-h100-tp4-llama3-70b-inf-n160": (34050, 28389, 37),
    "lambda-v060-h100-tp8-llama3-70b-inf-n10": (1369, 2054, 2),
    "lambda-v060-h100-tp8-llama3-70b-inf-n20": (3590, 3941, 3),
    "lambda-v060-h100-tp8-llama3-70b-inf-n160": (34050, 28293, 37),
    "lambda-v060-a100-tp1-llama3-8b-inf-n10": (1369, 1945, 0),
    "lambda-v060-a100-tp1-llama3-8b-inf-n20": (3590, 3923, 0),
    "lambda-v060-a100-tp1-llama3-8b-inf-n160": (34050, 31789, 8),
    "lambda-v060-a100-tp2-llama3-8b-inf-n10": (1369, 2104, 0),
    "lambda-v060-a100-tp2-llama3-8b-inf-n20": (3590, 3931, 0),
    "lambda-v060-a100-tp2-llama3-8b-inf-n160": (34050, 32023, 8),
    "lambda-v060-a100-tp4-llama3-8b-inf-n10": (1369, 1872, 0),
    "lambda-v060-a100-tp4-llama3-8b-inf-n20": (3590, 3934, 0),
    "lambda-v060-a100-tp4-llama3-8b-inf-n160": (34050, 32080, 8),
    "lambda-v060-a100-tp8-llama3-8b-inf-n10": (1369, 1892, 0),
    "lambda-v060-a100-tp8-llama3-8b-inf-n20": (3590, 3868, 0),
    "lambda-v060-a100-tp8-llama3-8b-inf-n160": (34050, 31621, 7),
    "lambda-v060-a100-tp1-mistral7b-inf-n10": (1585, 2440, 1),
    "lambda-v060-a100-tp1-mistral7b-inf-n20": (3438, 4880, 1),
    "lambda-v060-a100-tp1-mistral7b-inf-n160": (37741, 33898, 14),
    "lambda-v060-a100-tp2-mistral7b-inf-n10": (1585, 2498, 1),
    "lambda-v060-a100-tp2-mistral7b-inf-n20": (3438, 4992, 1),
    "lambda-v060-a100-tp2-mistral7b-inf-n160": (37741, 34205, 14),
    "lambda-v060-a100-tp4-mistral7b-inf-n10": (1585, 2440, 1),
    "lambda-v060-a100-tp4-mistral7b-inf-n20": (3438, 4888, 1),
    "lambda-v060-a100-tp4-mistral7b-inf-n160": (37741, 34267, 14),
    "lambda-v060-a100-tp8-mistral7b-inf-n10": (1585, 2401, 1),
    "lambda-v060-a100-tp8-mistral7b-inf-n20": (3438, 4991, 1),
    "lambda-v060-a100-tp8-mistral7b-inf-n160": (37741, 34478, 14),
    "lambda-v060-a100-tp2-llama3-70b-inf-n10": (1369, 2149, 2),
    "lambda-v060-a100-tp2-llama3-70b-inf-n20": (3590, 3997, 3),
    "lambda-v060-a100-tp4-llama3-70b-inf-n10": (1369, 2009, 2),
    "lambda-v060-a100-tp4-llama3-70b-inf-n20": (3590, 4100, 3),
    "lambda-v060-a100-tp4-llama3-70b-inf-n160": (34050, 27468, 37),
    "lambda-v060-a100-tp8-llama3-70b-inf-n10": (1369, 2089, 2),
    "lambda-v060-a100-tp8-llama3-70b-inf-n20": (3590, 4029, 3),
    "lambda-v060-a100-tp8-llama3-70b-inf-n160": (34050, 28004, 38),
    # the 40-, 80- and 320-prompt files of the same commits (stop 53)
    "lambda-v060-h100-tp2-llama3-70b-inf-n40": (8595, 6974, 7),
    "lambda-v060-h100-tp4-llama3-70b-inf-n40": (8595, 6942, 7),
    "lambda-v060-h100-tp8-llama3-70b-inf-n40": (8595, 6870, 7),
    "lambda-v060-h100-tp2-llama3-70b-inf-n80": (19504, 12789, 17),
    "lambda-v060-h100-tp4-llama3-70b-inf-n80": (19504, 12868, 17),
    "lambda-v060-h100-tp8-llama3-70b-inf-n80": (19504, 12901, 17),
    "lambda-v060-h100-tp4-llama3-70b-inf-n320": (65578, 56543, 78),
    "lambda-v060-h100-tp8-llama3-70b-inf-n320": (65578, 55791, 78),
    "lambda-v060-h100-tp1-llama3-8b-inf-n40": (8595, 7692, 0),
    "lambda-v060-h100-tp2-llama3-8b-inf-n40": (8595, 7666, 0),
    "lambda-v060-h100-tp4-llama3-8b-inf-n40": (8595, 7733, 0),
    "lambda-v060-h100-tp8-llama3-8b-inf-n40": (8595, 7682, 0),
    "lambda-v060-h100-tp1-llama3-8b-inf-n80": (19504, 14134, 1),
    "lambda-v060-h100-tp2-llama3-8b-inf-n80": (19504, 14132, 1),
    "lambda-v060-h100-tp4-llama3-8b-inf-n80": (19504, 14104, 1),
    "lambda-v060-h100-tp8-llama3-8b-inf-n80": (19504, 14189, 1),
    "lambda-v060-h100-tp1-llama3-8b-inf-n320": (65578, 65331, 17),
    "lambda-v060-h100-tp2-llama3-8b-inf-n320": (65578, 65649, 17),
    "lambda-v060-h100-tp4-llama3-8b-inf-n320": (65578, 65375, 17),
    "lambda-v060-h100-tp8-llama3-8b-inf-n320": (65578, 65853, 17),
    "lambda-v060-h100-tp1-mistral7b-inf-n40": (9349, 9012, 2),
    "lambda-v060-h100-tp2-mistral7b-inf-n40": (9349, 8967, 2),
    "lambda-v060-h100-tp4-mistral7b-inf-n40": (9349, 8822, 2),
    "lambda-v060-h100-tp8-mistral7b-inf-n40": (9349, 9065, 2),
    "lambda-v060-h100-tp1-mistral7b-inf-n80": (21713, 16130, 6),
    "lambda-v060-h100-tp2-mistral7b-inf-n80": (21713, 16111, 6),
    "lambda-v060-h100-tp4-mistral7b-inf-n80": (21713, 16194, 6),
    "lambda-v060-h100-tp8-mistral7b-inf-n80": (21713, 16161, 6),
    "lambda-v060-h100-tp1-mistral7b-inf-n320": (73671, 72094, 34),
    "lambda-v060-h100-tp2-mistral7b-inf-n320": (73671, 71796, 34),
    "lambda-v060-h100-tp4-mistral7b-inf-n320": (73671, 71431, 34),
    "lambda-v060-h100-tp8-mistral7b-inf-n320": (73671, 71658, 34),
    "lambda-v060-a100-tp2-llama3-70b-inf-n40": (8595, 6797, 7),
    "lambda-v060-a100-tp4-llama3-70b-inf-n40": (8595, 6963, 7),
    "lambda-v060-a100-tp8-llama3-70b-inf-n40": (8595, 6909, 7),
    "lambda-v060-a100-tp2-llama3-70b-inf-n80": (19504, 12924, 17),
    "lambda-v060-a100-tp4-llama3-70b-inf-n80": (19504, 12409, 18),
    "lambda-v060-a100-tp8-llama3-70b-inf-n80": (19504, 12807, 17),
    "lambda-v060-a100-tp4-llama3-70b-inf-n320": (65578, 55641, 78),
    "lambda-v060-a100-tp8-llama3-70b-inf-n320": (65578, 56599, 77),
    "lambda-v060-a100-tp1-llama3-8b-inf-n40": (8595, 7721, 0),
    "lambda-v060-a100-tp2-llama3-8b-inf-n40": (8595, 7608, 0),
    "lambda-v060-a100-tp4-llama3-8b-inf-n40": (8595, 7744, 0),
    "lambda-v060-a100-tp8-llama3-8b-inf-n40": (8595, 7765, 0),
    "lambda-v060-a100-tp1-llama3-8b-inf-n80": (19504, 14198, 1),
    "lambda-v060-a100-tp2-llama3-8b-inf-n80": (19504, 14144, 1),
    "lambda-v060-a100-tp4-llama3-8b-inf-n80": (19504, 14284, 1),
    "lambda-v060-a100-tp8-llama3-8b-inf-n80": (19504, 14199, 1),
    "lambda-v060-a100-tp1-llama3-8b-inf-n320": (65578, 65374, 17),
    "lambda-v060-a100-tp2-llama3-8b-inf-n320": (65578, 65784, 17),
    "lambda-v060-a100-tp4-llama3-8b-inf-n320": (65578, 64905, 17),
    "lambda-v060-a100-tp8-llama3-8b-inf-n320": (65578, 65441, 17),
    "lambda-v060-a100-tp1-mistral7b-inf-n40": (9349, 8995, 2),
    "lambda-v060-a100-tp2-mistral7b-inf-n40": (9349, 9025, 2),
    "lambda-v060-a100-tp4-mistral7b-inf-n40": (9349, 8965, 2),
    "lambda-v060-a100-tp8-mistral7b-inf-n40": (9349, 8994, 2),
    "lambda-v060-a100-tp1-mistral7b-inf-n80": (21713, 15899, 6),
    "lambda-v060-a100-tp2-mistral7b-inf-n80": (21713, 16108, 6),
    "lambda-v060-a100-tp4-mistral7b-inf-n80": (21713, 15752, 6),
    "lambda-v060-a100-tp8-mistral7b-inf-n80": (21713, 15904, 6),
    "lambda-v060-a100-tp1-mistral7b-inf-n320": (73671, 71372, 34),
    "lambda-v060-a100-tp2-mistral7b-inf-n320": (73671, 71276, 34),
    "lambda-v060-a100-tp4-mistral7b-inf-n320": (73671, 71477, 34),
    "lambda-v060-a100-tp8-mistral7b-inf-n320": (73671, 71821, 34),
}

# scicom_vllm: id -> (prompt tokens of every request, prompts, max concurrency, the printed
# mean TTFT in ms; every request has 128 output tokens)
SCICOM_VLLM = {
    "scicom-vllm-h100-tp8-llama3-70b-in128-c10": (127, 1000, 10, 61.14),
    "scicom-vllm-h100-tp8-llama3-70b-in128-c25": (127, 1000, 25, 83.22),
    "scicom-vllm-h100-tp8-llama3-70b-in128-c50": (127, 1000, 50, 165.15),
    "scicom-vllm-h100-tp8-llama3-70b-in128-c200": (127, 1000, 200, 715.69),
    "scicom-vllm-h100-tp8-llama3-70b-in512-c10": (511, 1000, 10, 169.90),
    "scicom-vllm-h100-tp8-llama3-70b-in512-c25": (511, 1000, 25, 283.38),
    "scicom-vllm-h100-tp8-llama3-70b-in512-c50": (511, 1000, 50, 596.37),
    "scicom-vllm-h100-tp8-llama3-70b-in512-c200": (511, 1000, 200, 1612.57),
    "scicom-vllm-h100-tp8-llama3-70b-in1024-c10": (1023, 1000, 10, 366.09),
    "scicom-vllm-h100-tp8-llama3-70b-in1024-c25": (1023, 1000, 25, 649.04),
    "scicom-vllm-h100-tp8-llama3-70b-in1024-c50": (1023, 1000, 50, 1095.25),
    "scicom-vllm-h100-tp8-llama3-70b-in1024-c200": (1023, 1000, 200, 2175.21),
    "scicom-vllm-h100-tp8-llama3-70b-in2048-c10": (2047, 500, 10, 616.77),
    "scicom-vllm-h100-tp8-llama3-70b-in2048-c25": (2047, 500, 25, 1163.94),
    "scicom-vllm-h100-tp8-llama3-70b-in2048-c50": (2047, 500, 50, 1514.31),
    "scicom-vllm-h100-tp8-llama3-70b-in2048-c200": (2047, 500, 200, 4563.04),
    "scicom-vllm-h100-tp8-llama3-70b-in4096-c10": (4095, 500, 10, 1114.50),
    "scicom-vllm-h100-tp8-llama3-70b-in4096-c25": (4095, 500, 25, 1752.83),
    "scicom-vllm-h100-tp8-llama3-70b-in4096-c50": (4095, 500, 50, 1987.51),
    "scicom-vllm-h100-tp8-llama3-70b-in4096-c200": (4095, 500, 200, 8082.65),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in128-c10": (127, 1000, 10, 56.03),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in128-c25": (127, 1000, 25, 75.40),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in128-c50": (127, 1000, 50, 117.50),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in128-c200": (127, 1000, 200, 618.75),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in512-c10": (511, 1000, 10, 105.83),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in512-c25": (511, 1000, 25, 172.43),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in512-c50": (511, 1000, 50, 463.29),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in512-c200": (511, 1000, 200, 1694.00),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in1024-c10": (1023, 1000, 10, 138.56),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in1024-c25": (1023, 1000, 25, 175.87),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in1024-c50": (1023, 1000, 50, 845.50),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in1024-c200": (1023, 1000, 200, 2290.68),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in2048-c10": (2047, 500, 10, 262.50),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in2048-c25": (2047, 500, 25, 378.24),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in2048-c50": (2047, 500, 50, 1287.14),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in2048-c200": (2047, 500, 200, 4023.99),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in4096-c10": (4095, 500, 10, 414.05),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in4096-c25": (4095, 500, 25, 592.27),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in4096-c50": (4095, 500, 50, 1272.17),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in4096-c200": (4095, 500, 200, 7215.28),
    "scicom-vllm-h100-tp8-llama3-70b-in128-c100-apr09": (127, 1000, 100, 389.93),
    "scicom-vllm-h100-tp8-llama3-70b-in512-c100-apr09": (511, 1000, 100, 1147.62),
    "scicom-vllm-h100-tp8-llama3-70b-in1024-c100-apr09": (1023, 1000, 100, 1637.33),
    "scicom-vllm-h100-tp8-llama3-70b-in2048-c100-apr09": (2047, 500, 100, 2121.78),
    "scicom-vllm-h100-tp8-llama3-70b-in4096-c100-apr09": (4095, 500, 100, 3423.07),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in128-c100-apr09": (127, 1000, 100, 205.45),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in512-c100-apr09": (511, 1000, 100, 994.67),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in1024-c100-apr09": (1023, 1000, 100, 1148.38),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in2048-c100-apr09": (2047, 500, 100, 1887.56),
    "scicom-vllm-h100-tp4-dp2-llama3-70b-in4096-c100-apr09": (4095, 500, 100, 2486.70),
}

# scicom_sglang: id -> (the printed total input tokens, total output tokens, the server's
# logged max_total_num_tokens: its KV pool in tokens, page size 1)
SCICOM_SGLANG = {
    "scicom-sglang-h100-tp8-dp1-llama3-70b-in1024": (50461, 6108, 1392213),
    "scicom-sglang-h100-tp8-dp1-llama3-70b-in2048": (108829, 6108, 1392213),
    "scicom-sglang-h100-tp8-dp1-llama3-70b-in4096": (209181, 6108, 1392213),
    "scicom-sglang-h100-tp4-dp2-llama3-70b-in1024": (50461, 6108, 481117),
    "scicom-sglang-h100-tp4-dp2-llama3-70b-in2048": (108829, 6108, 481117),
    "scicom-sglang-h100-tp4-dp2-llama3-70b-in4096": (209181, 6108, 481117),
    "scicom-sglang-h100-tp8-dp1-llama3-70b-in8192": (389405, 6108, 1392213),
    "scicom-sglang-h100-tp4-dp2-llama3-70b-in8192": (389405, 6108, 481117),
}

# vllm-project/vllm#6883's PERFORMANCE table (ms): column -> (TTFT mean, TPOT mean)
PR6883 = {"vllm-pr6883-h100-tp1-llama3-8b-qps-10-main": (687.69, 70.74),
          "vllm-pr6883-h100-tp1-llama3-8b-qps-10-zmq": (298.09, 57.35)}


def test_the_runs_file_parses_and_matches_the_source_totals():
    sources, runs = load_runs()
    assert set(sources) == {"llmk8s", "datacrunch", "lambda", "vllm_pr6883", "lambda_v060",
                            "scicom_vllm", "scicom_sglang"}
    assert {r.id for r in runs} == set(SOURCE_TOTALS) | {
        f"datacrunch-h200-tp4-sglang-{k}" for k in DATACRUNCH} | set(LAMBDA) | set(PR6883) | \
        set(LAMBDA_V060) | set(SCICOM_VLLM) | set(SCICOM_SGLANG)
    for r in runs:
        at = "#" + sources[r.source]["pull_request"].rsplit("/", 1)[1] \
            if "pull_request" in sources[r.source] else "@"
        assert r.source in sources and r.locator.startswith(sources[r.source]["repo"] + at)
        if r.source != "llmk8s":
            continue
        assert len(r.prompt_tokens) == len(r.output_tokens) == 200
        assert sum(r.prompt_tokens) == 42659
        assert sum(r.output_tokens) == SOURCE_TOTALS[r.id]
        assert set(r.served_before) < set(SOURCE_TOTALS)
        assert r.measured["ttft_s"]["mean"] > 0


def test_the_datacrunch_lengths_are_the_clients_seeded_draw_and_its_totals():
    """SGLang's bench_serving (random dataset, range ratio 0, seed 1) draws the prompt lengths
    uniformly in [1, input] and then the output lengths in [0, output] from numpy's legacy
    generator: the file holds that draw, the few zero outputs served as one token."""
    import numpy as np

    data = {r["id"]: r for r in json.loads(RUNS_FILE.read_text())["runs"]}
    for key, (inp, out, n, total_in, total_out) in DATACRUNCH.items():
        r = data[f"datacrunch-h200-tp4-sglang-{key}"]
        rng = np.random.RandomState(1)
        prompts, outputs = rng.randint(1, inp + 1, n), rng.randint(0, out + 1, n)
        assert r["prompt_tokens"] == prompts.tolist() and sum(r["prompt_tokens"]) == total_in
        assert r["output_tokens"] == np.maximum(outputs, 1).tolist()
        assert sum(r["output_tokens"]) - r["zero_output_requests"] == total_out
        assert r["zero_output_requests"] == int((outputs == 0).sum())
        assert (r["arrival"] == "burst") == key.startswith("inf")
        assert r["measured"]["e2e_s"]["mean"] > r["measured"]["ttft_s"]["p50"] > 0


def test_the_lambda_runs_keep_the_printed_totals_and_the_servers_flags():
    """The vLLM 0.5.4 result files list every request's lengths; the requests that returned
    no token are served with one, and their TTFT of 0 (the client's placeholder) is left out
    of the scored TTFT statistics, whose mean therefore exceeds the printed one. The result
    path names the server: `{N}x{GPU}/..._tp{N}_len{L}.json` is N GPUs of one 8-GPU server at
    TP N with --max-model-len L, which V0 without chunked prefill batches max(L, 2048) tokens
    of per step."""
    import re

    data = {r["id"]: r for r in json.loads(RUNS_FILE.read_text())["runs"]}
    assert {k for k, r in data.items() if r["source"] == "lambda"} == set(LAMBDA)
    systems = {"H100": "h100-80gb-x8", "A100": "a100-80gb-x8"}
    for key, (total_in, total_out, empty) in LAMBDA.items():
        r = data[key]
        assert sum(r["prompt_tokens"]) == total_in and r["zero_output_requests"] == empty
        assert sum(r["output_tokens"]) - empty == total_out
        assert r["arrival"] == "burst" and r["software"] == "vllm-v0"
        gpus, gpu, tp, max_model_len = re.search(
            r"/(\d)x(H100|A100)-80GB-SXM/Mistral-7B-Instruct-v0.3_tp(\d)_len(\d+)\.json$",
            r["locator"]).groups()
        assert int(gpus) == int(tp) == r["tp"] and r["system"] == systems[gpu]
        assert f"-{gpu.lower()}-tp{tp}-" in key
        assert r["engine_options"] == {"max_num_batched_tokens": max(int(max_model_len), 2048),
                                       "gpu_memory_utilization": 0.95}
        m = r["measured"]
        assert m["ttft_s"]["mean"] > m["ttft_s_printed"]["mean"] > 0


def test_the_stated_ttft_statistics_are_those_of_the_saved_per_request_ttfts():
    """The llmk8s and lambda result files save every request's client TTFT (`ttfts`); the run
    keeps them, and its TTFT mean, median, p90 and p99 are numpy's statistics of them (as the
    client computes its printed ones) over the requests that returned a token (0.0 is the
    client's placeholder for none): the printed mean, median and p99 come out to the last
    digit, so the p90 no client printed is computed from the same values."""
    import numpy as np

    runs = [r for r in load_runs()[1] if r.ttfts_s is not None]
    assert {r.id for r in runs} == set(SOURCE_TOTALS) | set(LAMBDA) | set(LAMBDA_V060) | \
        set(SCICOM_SGLANG)
    for r in runs:
        ttfts = np.array([t for t in r.ttfts_s if t > 0])
        empty = {**LAMBDA, **LAMBDA_V060}.get(r.id, (0, 0, 0))[2]
        assert len(ttfts) == len(r.prompt_tokens) - empty
        stated = r.measured["ttft_s"]
        assert stated["mean"] == pytest.approx(ttfts.mean(), rel=1e-12)
        assert stated["p50"] == pytest.approx(np.median(ttfts), rel=1e-12)
        assert stated["p99"] == pytest.approx(np.percentile(ttfts, 99), rel=1e-12)
        assert stated["p90"] == pytest.approx(np.percentile(ttfts, 90), rel=1e-12)
        assert stated["p50"] < stated["p90"] <= stated["p99"]


def test_a_runs_engine_options_replace_the_engines_defaults_in_its_replay():
    from krakenlm.serving.validation import replay_run

    run = next(r for r in load_runs()[1] if r.id == "lambda-h100-tp1-mistral7b-inf-n10")
    report, summary = replay_run(run, client_side=False)
    assert report.setup["options"]["max_num_batched_tokens"] == 2048
    assert report.setup["kv_cache"]["utilization"] == 0.95
    assert summary["requests"] == len(run.prompt_tokens)
    default = replay_run(replace(run, engine_options=None), client_side=False)[0]
    assert default.setup["options"]["max_num_batched_tokens"] > 2048
    assert default.setup["kv_cache"]["utilization"] == 0.9
    assert score(run, summary)["ttft_mean"]["predicted"] > 0


def test_every_source_and_run_file_is_in_sources_md():
    text = (RUNS_FILE.parent / "SOURCES.md").read_text()
    sources, runs = load_runs()
    for key, s in sources.items():
        assert f"`{key}`" in text and s.get("commit", s.get("pull_request")) in text
    for r in runs:
        if r.source == "vllm_pr6883":  # a table in a pull request's description
            assert r.locator.split(" ")[0] in text
            continue
        assert r.locator.split(" ")[1].rsplit("_qps_", 1)[0].split("/")[-1] in text
        assert r.locator.split(" ")[0].split("@")[1] in text  # the commit that stores it


def _run():
    return next(r for r in load_runs()[1] if r.id == "llmk8s-a100-tp8-qps-04")


def test_score_is_the_relative_error_of_every_metric_both_give():
    run = _run()
    summary = {"ttft_s": {"mean": 1.1 * run.measured["ttft_s"]["mean"], "p99": None},
               "tpot_s": {"mean": 0.75 * run.measured["tpot_s"]["mean"]}}
    s = score(run, summary)
    assert set(s) == {"ttft_mean", "tpot_mean"}  # None and unmeasured ones are skipped
    assert s["ttft_mean"]["error"] == pytest.approx(0.10)
    assert s["tpot_mean"]["bias"] == pytest.approx(-0.25)
    m = medians([s, {"ttft_mean": {"error": 0.30}}, {"ttft_mean": {"error": 0.20}}])
    assert m["ttft_mean"] == {"median": pytest.approx(0.20), "worst": pytest.approx(0.30),
                              "runs": 3}
    assert m["tpot_mean"]["runs"] == 1


def test_a_measured_median_e2e_is_scored():
    run = next(r for r in load_runs()[1] if r.id == "datacrunch-h200-tp4-sglang-qps-01")
    measured = run.measured["e2e_s"]["p50"]
    s = score(run, {"e2e_s": {"mean": None, "p50": 0.9 * measured}})
    assert set(s) == {"e2e_p50"} and s["e2e_p50"]["bias"] == pytest.approx(-0.10)


def test_the_replayed_workload_warms_the_prefix_cache_with_the_earlier_runs():
    _, runs = load_runs()
    by_id = {r.id: r for r in runs}
    burst = by_id["llmk8s-a100-tp8-qps-inf"]
    trace, first = run_trace(burst, by_id)
    assert first == 3 * 201 + 1  # three earlier runs, each after its client's one-prompt
    # test, and this run's test
    warm, measured = trace.requests[:first], trace.requests[first:]
    assert all(r.output_tokens == 1 and r.arrival_s == 0 for r in warm)
    assert [r.prompt_tokens for r in measured] == list(burst.prompt_tokens)
    assert all(r.arrival_s == WARM_GAP_S for r in measured)  # a burst: all at once
    # the same prompt has the same prefix ids in every run, one per full block
    assert warm[0].hash_ids == warm[1].hash_ids  # the first earlier run's test prompt
    assert warm[1 + 5].hash_ids == measured[5].hash_ids
    assert len(measured[5].hash_ids) == burst.prompt_tokens[5] // PREFIX_BLOCK_TOKENS
    cold, first = run_trace(replace(burst, served_before=(), test_prompt_first=False))
    assert first == 0 and cold.requests[0].arrival_s == 0.0
    poisson = by_id["llmk8s-a100-tp8-qps-16"]
    a = [r.arrival_s for r in run_trace(poisson, by_id, seed=1)[0].requests]
    assert a == [r.arrival_s for r in run_trace(poisson, by_id, seed=1)[0].requests]
    gaps = [y - x for x, y in zip(a[-200:], a[-199:])]
    assert 0.5 / 16 < sum(gaps) / len(gaps) < 2 / 16


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r.pop("tp"), "missing or bad field"),
    (lambda r: r.update(arrival="closed"), "arrival 'closed' is not one of"),
    (lambda r: r.update(rate_per_s=None), "a Poisson run needs a rate"),
    (lambda r: r.update(output_tokens=[1]), "equally many counts"),
    (lambda r: r.update(source="nowhere"), "source 'nowhere' is not described"),
    (lambda r: r.update(engine_options={"max_model_len": 2000}),
     "engine_options max_model_len are not engine knobs"),
    (lambda r: r.update(ttfts_s=[0.1]), "ttfts_s must hold one client TTFT"),
    (lambda r: r["ttfts_s"].__setitem__(3, -0.5), "ttfts_s must hold one client TTFT"),
    (lambda r: r.update(ttfts_s="fast"), "missing or bad field"),
    (lambda r: r.update(arrival="concurrency"), "a concurrency run needs max_concurrency"),
    (lambda r: r.update(arrival="concurrency", max_concurrency=0),
     "a concurrency run needs max_concurrency"),
    (lambda r: r.update(arrival="concurrency", max_concurrency=-4),
     "a concurrency run needs max_concurrency"),
    (lambda r: r.update(arrival="concurrency", max_concurrency="many"), "missing or bad field"),
    (lambda r: r.update(max_concurrency=8), 'max_concurrency needs arrival "concurrency"'),
    (lambda r: r.update(rate_per_s=-1.0), "rate_per_s must be positive"),
    (lambda r: r.update(profile_charges="free"), "profile_charges 'free' is not one of"),
    (lambda r: r.update(replicas=0), "replicas must be at least 1 and router one of"),
    (lambda r: r.update(router="random"), "replicas must be at least 1 and router one of"),
    (lambda r: r.update(special_tokens_added=-1), "special_tokens_added must be at least 0"),
])
def test_a_bad_runs_file_is_one_error_naming_the_run(tmp_path, change, message):
    data = json.loads(RUNS_FILE.read_text())
    data["runs"] = [data["runs"][1]]
    change(data["runs"][0])
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValidationDataError, match=message) as e:
        load_runs(path)
    assert "llmk8s-a100-tp8-qps-04" in str(e.value) and "\n" not in str(e.value)


def test_under_two_replicas_the_test_prompts_decide_which_earlier_prompt_a_request_meets():
    """SGLang's round-robin DP router counts every request, and each earlier run sent 1 test
    + 100 prompts, so the parity flips from run to run: in4096's prompt i reaches the replica
    that served in1024's prompt i (not in2048's), and its radix cache holds that prompt's
    whole blocks (all but the last block when the two are the same length)."""
    _, runs = load_runs()
    by_id = {r.id: r for r in runs}
    run = by_id["scicom-sglang-h100-tp4-dp2-llama3-70b-in4096"]
    _, first = run_trace(run, by_id)
    assert first == 2 * 101 + 1
    report, _ = replay_run(run, by_id)
    rows = sorted((r for r in report.rows if r["id"] >= first), key=lambda r: r["id"])
    earlier = by_id["scicom-sglang-h100-tp4-dp2-llama3-70b-in1024"].prompt_tokens
    block = PREFIX_BLOCK_TOKENS
    for r, q in list(zip(rows, earlier))[1:]:  # row 0 is its own test prompt's, a full hit
        assert r["cached_tokens"] == min(q // block * block, (r["prompt_tokens"] - 1) // block
                                         * block), r


def test_a_run_naming_an_unknown_earlier_run_is_an_error():
    run = replace(_run(), served_before=("nowhere",))
    with pytest.raises(ValidationDataError, match="unknown run 'nowhere'"):
        run_trace(run, {})


def test_a_concurrency_run_replays_its_clients_closed_loop():
    """A run with arrival "concurrency" is sent as its rate says (all at once without one)
    and replayed with at most `max_concurrency` requests in flight."""
    base = replace(_run(), served_before=(), test_prompt_first=False, arrival="burst",
                   rate_per_s=None, prompt_tokens=(300,) * 6, output_tokens=(20,) * 6,
                   ttfts_s=None, measured={})
    capped = replace(base, arrival="concurrency", max_concurrency=2)
    trace, first = run_trace(capped)
    assert first == 0 and [r.arrival_s for r in trace.requests] == [0.0] * 6
    paced = replace(capped, rate_per_s=4.0)
    assert run_trace(paced, seed=3)[0].requests == \
        run_trace(replace(base, arrival="poisson", rate_per_s=4.0), seed=3)[0].requests
    _, summary = replay_run(capped)
    report, _ = replay_run(capped)
    sent = sorted(r["arrival_s"] for r in report.rows)
    assert sent[:2] == [0.0, 0.0] and sent[2] > 0  # the third waits for a finish
    assert all(sum(r["arrival_s"] <= t < r["finish_s"] for r in report.rows) <= 2
               for t in sent)
    assert summary["e2e_s"]["mean"] < replay_run(base)[1]["e2e_s"]["mean"]  # less queueing


def test_each_run_is_sized_with_its_engine_versions_accounting():
    # vLLM 0.8.3 (llmk8s) is a V1 before vllm-project/vllm#19312: it charged the memory in use
    # (the runtime reserve), not the vllm profile's since-init; lambda (0.5.4, vllm-v0) is its
    # profile's total-used already, datacrunch (SGLang) its profile's free-share
    from krakenlm.serving.kv_cache import with_accounting
    from krakenlm.simulator.constants.software import load_software
    _sources, runs = load_runs()
    for run in runs:
        software = with_accounting(run.software, run.profile_charges)
        profile = software if not isinstance(software, str) else load_software(software)
        # scicom_vllm (vLLM V1 of 2026) is after #19312: its profile's since-init
        expected = {"datacrunch": "free-share", "scicom_sglang": "free-share",
                    "scicom_vllm": "since-init"}.get(
            run.source, "total-used")
        assert profile.kv_profile.accounting == expected, run.id
    assert {r.profile_charges for r in runs if r.source == "llmk8s"} == {"total-used"}


def test_the_pr6883_runs_are_its_table_at_the_stated_setup():
    """Llama-3-8B-Instruct on one H100, 600 sonnet prompts (benchmark_serving's defaults: 550
    tokens in, 150 out; lengths per request not saved) at 10 requests/s, V0 with chunked
    prefill at its default budget; the two released designs' means, in seconds."""
    runs = {r.id: r for r in load_runs()[1] if r.source == "vllm_pr6883"}
    assert set(runs) == set(PR6883)
    for key, (ttft_ms, tpot_ms) in PR6883.items():
        r = runs[key]
        assert (r.model, r.system, r.software, r.tp) == ("llama3-8b", "h100-80gb-x8", "vllm-v0", 1)
        assert (r.arrival, r.rate_per_s) == ("poisson", 10.0)
        assert r.prompt_tokens == (550,) * 600 and r.output_tokens == (150,) * 600
        assert r.engine_options == {"chunked_prefill": True, "max_num_batched_tokens": 512}
        assert r.measured == {"ttft_s": {"mean": ttft_ms / 1000}, "tpot_s": {"mean": tpot_ms / 1000}}
        assert f"TTFT (mean) {ttft_ms:.2f} ms, TPOT (mean) {tpot_ms:.2f} ms" in r.locator


def test_the_lambda_v060_runs_keep_the_printed_totals_and_the_servers_flags():
    """vLLM 0.6.0 with --num-scheduler-steps 10 (the repository's report), max-num-seqs 256,
    max-model-len 2048 (H100, `len2048`) or 2000 (A100, `len2000`): V0 batches max(L, 2048)
    tokens per step. The printed TTFT statistics count the requests that returned no token
    (TTFT 0.0), which the scored ones leave out; the client's latency statistics are the E2E."""
    import re

    data = {r["id"]: r for r in json.loads(RUNS_FILE.read_text())["runs"]}
    assert {k for k, r in data.items() if r["source"] == "lambda_v060"} == set(LAMBDA_V060)
    systems = {"H100": "h100-80gb-x8", "A100": "a100-80gb-x8"}
    models = {"Meta-Llama-3-8B-Instruct": "llama3-8b", "Mistral-7B-Instruct-v0.3": "mistral-7b",
              "Meta-Llama-3-70B-Instruct": "llama3-70b"}
    commits = {"H100": "a4f9f4371a1ccac781293837fce2bce0cc6d25cc",
               "A100": "a9b42a5f83bc39976bcb6bd44a96b2b15d820e10"}
    for key, (total_in, total_out, empty) in LAMBDA_V060.items():
        r = data[key]
        assert sum(r["prompt_tokens"]) == total_in and r["zero_output_requests"] == empty
        assert sum(r["output_tokens"]) - empty == total_out
        assert r["arrival"] == "burst" and r["software"] == "vllm-v0"
        prompts, gpus, gpu, model, tp, max_model_len = re.search(
            r"results/prompt_(\d+)/(\d)x(H100|A100)-80GB-SXM/(.+)_tp(\d)_len(\d+)\.json$",
            r["locator"]).groups()
        assert r["locator"].startswith(f"LambdaLabsML/vllm-benchmark@{commits[gpu]} ")
        assert int(gpus) == int(tp) == r["tp"] and r["system"] == systems[gpu]
        assert r["model"] == models[model] and len(r["prompt_tokens"]) == int(prompts)
        assert int(max_model_len) == {"H100": 2048, "A100": 2000}[gpu]
        assert r["engine_options"] == {"max_num_batched_tokens": 2048, "max_num_seqs": 256,
                                       "gpu_memory_utilization": 0.95,
                                       "num_scheduler_steps": 10}
        m = r["measured"]
        assert m["e2e_s"]["p99"] >= m["e2e_s"]["p50"] > 0
        assert (m["ttft_s"]["mean"] > m["ttft_s_printed"]["mean"]) == (empty > 0)
        # tokens come in chunks of a round of 10: the client's mean ITL is 8-10 median TPOTs,
        # but on the H100 Mistral TP 8 10-prompt run, whose slow TPOT (a cold server, SOURCES.md)
        # leaves 4.6
        ratio = m["itl_s"]["mean"] / m["tpot_s"]["p50"]
        cold = key == "lambda-v060-h100-tp8-mistral7b-inf-n10"
        assert 4 < ratio < 5 if cold else 8 < ratio < 10, (key, ratio)


def test_a_run_with_replicas_is_replayed_on_that_many_engines():
    """A server of two engine replicas (vLLM's --data-parallel-size 2) behind a router: the
    replay serves the run's requests on two replicas of its TP."""
    from krakenlm.serving.validation import replay_run

    run = next(r for r in load_runs()[1] if r.id == "lambda-h100-tp1-mistral7b-inf-n20")
    one = replay_run(run, client_side=False)[0]
    two = replay_run(replace(run, replicas=2), client_side=False)[0]
    assert one.setup["replicas"] == 1 and two.setup["replicas"] == 2
    assert two.setup["router"] == "least-loaded"
    assert two.summary["ttft_s"]["mean"] < one.summary["ttft_s"]["mean"]


def test_the_scicom_vllm_runs_are_fixed_lengths_in_a_closed_loop():
    """`vllm bench serve` on the random dataset with range ratio 0 and ignore_eos: every request
    L - 1 prompt tokens (the saved input_lens; the engine sees L, with the BOS token
    vllm/benchmarks/datasets.py leaves out of its count) and 128 output tokens, C requests in flight, the
    file name's TP and DP (replicas behind vLLM's load balancer) on 8x H100 SXM, and the printed
    statistics in seconds."""
    import re

    runs = {r.id: r for r in load_runs()[1] if r.source == "scicom_vllm"}
    assert set(runs) == set(SCICOM_VLLM)
    for key, (prompt, n, concurrency, ttft_ms) in SCICOM_VLLM.items():
        r = runs[key]
        length, prompts, c = map(int, re.search(r"_in(\d+)_out128_p(\d+)_c(\d+)_",
                                                r.locator).groups())
        assert (prompt, n, concurrency) == (length - 1, prompts, c)
        tp, dp = map(int, re.search(r"_TP(\d)_DP(\d)_", r.locator).groups())
        assert (r.tp, r.replicas, r.system, r.software) == (tp, dp, "h100-80gb-x8", "vllm")
        assert key.startswith(f"scicom-vllm-h100-tp{tp}-" + (f"dp{dp}-" if dp > 1 else ""))
        assert r.prompt_tokens == (prompt,) * n and r.output_tokens == (128,) * n
        # the random dataset counts L less the tokenizer's special tokens; the server adds BOS
        assert r.special_tokens_added == 1
        trace, first = run_trace(r, runs)
        assert {q.prompt_tokens for q in trace.requests[first:]} == {length}
        assert (r.arrival, r.max_concurrency) == ("concurrency", concurrency)
        assert r.router == ("vllm-dp" if dp > 1 else "least-loaded")  # vLLM's DP balancer
        assert 1000 * r.measured["ttft_s"]["mean"] == pytest.approx(ttft_ms, abs=0.005)
        m = r.measured
        assert m["e2e_s"]["p99"] >= m["e2e_s"]["p50"] > m["ttft_s"]["p50"] > 0
        # every request has 128 output tokens, so the client's TPOT is (E2E - TTFT) / 127 for
        # each and the printed means obey it exactly: a check of the transcribed statistics
        assert m["e2e_s"]["mean"] == pytest.approx(m["ttft_s"]["mean"] + 127 * m["tpot_s"]["mean"],
                                                   rel=1e-6)
        assert m["throughput"]["requests_per_s"] == pytest.approx(n / m["duration_s"], rel=1e-9)


def test_the_scicom_sglang_runs_keep_their_server_info_and_nest_their_prompts():
    """SGLang 0.5.9's own `server_info` sets the engine knobs; the random dataset with the
    same seed makes each run's prompt i the first tokens of the same text, as long as or
    longer than the run before's (the same length or longer by a multiple of 1024), which the
    warm radix cache of the same server reuses: every run names the earlier runs of its
    server and the client's test prompt."""
    import re

    runs = {r.id: r for r in load_runs()[1] if r.source == "scicom_sglang"}
    assert set(runs) == set(SCICOM_SGLANG)
    for key, (total_in, total_out, pool_tokens) in SCICOM_SGLANG.items():
        r = runs[key]
        tp, dp, n = map(int, re.search(r"/tp(\d)_dp(\d)_Llama3.1-70B_in(\d+)_out128_p100_c100_",
                                       r.locator).groups())
        assert (r.tp, r.replicas, r.router, r.software) == (tp, dp, "round-robin", "sglang")
        assert sum(r.prompt_tokens) == total_in and sum(r.output_tokens) == total_out
        assert max(r.prompt_tokens) <= n and max(r.output_tokens) <= 128
        assert (r.arrival, r.max_concurrency) == ("concurrency", 100)
        assert r.engine_options == {"max_num_batched_tokens": 8192, "gpu_memory_utilization": 0.9,
                                    "block_size": 1, "schedule_policy": "fcfs"}
        assert r.kv_blocks_logged == pool_tokens and r.test_prompt_first
        for b in (runs[name] for name in r.served_before):  # nested prompts
            assert len(b.prompt_tokens) == 100
            assert all(p >= q and (p - q) % 1024 == 0
                       for p, q in zip(r.prompt_tokens, b.prompt_tokens))
