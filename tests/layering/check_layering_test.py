#!/usr/bin/env python3
"""Feeds check_layering.py fabricated trees: a clean one must pass, and each kind of violation
(an upward include, public header, quoted or angled, internal or relative path) must fail with a
message naming the file and the rule it breaks."""
import os
import subprocess
import sys
import tempfile
import unittest

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_layering.py")


def write_tree(root, files):
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)


# A small tree that follows every rule: it must pass, so that each test below fails for the one
# violation it adds and for nothing else.
CLEAN = {
    "include/lockstep/core/tensor.h": "#pragma once\n#include <vector>\n",
    "include/lockstep/core.h": '#pragma once\n#include "lockstep/core/tensor.h"\n',
    "include/lockstep/ops/matmul.h": '#pragma once\n#include "lockstep/core/tensor.h"\n',
    "include/lockstep/keras/layer.h":
        '#pragma once\n#include <nlohmann/json_fwd.hpp>\n#include "lockstep/ops/matmul.h"\n',
    "include/lockstep/lockstep.h": '#pragma once\n#include "lockstep/keras/layer.h"\n',
    "src/core/cpu_dispatch.h": "#pragma once\n",
    "src/core/tensor.cpp": '#include "lockstep/core/tensor.h"\n#include "cpu_dispatch.h"\n',
    "src/ops/internal.h": '#pragma once\n#include "lockstep/core/tensor.h"\n',
    "src/ops/matmul.cpp":
        '#include "lockstep/ops/matmul.h"\n#include "internal.h"\n#include "core/cpu_dispatch.h"\n'
        "#include <dnnl.hpp>\n",
    "src/distribute/collectives/mpi.cpp": "#include <mpi.h>\n#include <nlohmann/json.hpp>\n",
    "src/distribute/sync/futex.h": "#pragma once\n",
    "src/distribute/strategy/pool.cpp": '#include "../sync/futex.h"\n',
    "src/keras/model.cpp": '#include "lockstep/distribute/strategy.h"\n',
    "apps/main.cpp": '#include "lockstep/lockstep.h"\n#include "commands.h"\n',
    "apps/commands.h": "#pragma once\n",
}


class CheckLayering(unittest.TestCase):
    def run_checker(self, extra):
        with tempfile.TemporaryDirectory() as root:
            files = dict(CLEAN)
            files.update(extra)
            write_tree(root, files)
            result = subprocess.run([sys.executable, CHECKER, root], capture_output=True,
                                    text=True, check=False)
            return result.returncode, result.stdout + result.stderr

    def assert_violation(self, extra, *fragments):
        code, output = self.run_checker(extra)
        self.assertEqual(code, 1, output)
        for fragment in fragments:
            self.assertIn(fragment, output)
        self.assertIn("1 layering violation(s)", output)

    def test_clean_tree_passes(self):
        code, output = self.run_checker({})
        self.assertEqual(code, 0, output)
        self.assertIn("0 layering violation(s)", output)

    def test_source_including_a_higher_layers_public_header_fails(self):
        self.assert_violation(
            {"src/ops/conv.cpp": '#include "lockstep/autodiff/variable.h"\n'},
            "src/ops/conv.cpp:1", "layer 'ops' includes a header of layer 'autodiff'")

    def test_public_header_including_a_higher_layer_fails(self):
        self.assert_violation(
            {"include/lockstep/distribute/strategy.h":
                 '#pragma once\n#include <vector>\n#include <lockstep/keras/model.h>\n'},
            "include/lockstep/distribute/strategy.h:3",
            "layer 'distribute' includes a header of layer 'keras'")

    def test_trace_analysis_reaching_for_a_strategy_fails(self):
        # Reading a trace needs core's spans alone; the profiler's gathering is distribute's.
        self.assert_violation(
            {"src/trace/summary.cpp": '#include "lockstep/distribute/strategy.h"\n'},
            "src/trace/summary.cpp:1", "layer 'trace' includes a header of layer 'distribute'")

    def test_including_a_higher_layers_umbrella_fails(self):
        self.assert_violation({"src/data/dataset.cpp": '#include "lockstep/lockstep.h"\n'},
                              "layer 'data' includes a header of layer 'keras'")

    def test_source_including_a_higher_layers_internal_header_fails(self):
        self.assert_violation({"src/core/storage.cpp": '#include "ops/internal.h"\n'},
                              "src/core/storage.cpp:1",
                              "layer 'core' includes a header of layer 'ops'")

    def test_relative_path_into_a_higher_layer_fails(self):
        self.assert_violation(
            {"src/autodiff/tape.cpp": '#include "../keras/engine/training_state.h"\n',
             "src/keras/engine/training_state.h": "#pragma once\n"},
            "layer 'autodiff' includes a header of layer 'keras'")

    def test_public_header_including_an_internal_header_fails(self):
        self.assert_violation(
            {"include/lockstep/ops/softmax.h": '#pragma once\n#include "core/cpu_dispatch.h"\n'},
            "include/lockstep/ops/softmax.h:2", "includes the internal header of layer 'core'")

    def test_app_including_an_internal_header_fails(self):
        self.assert_violation({"apps/train.cpp": '#include "ops/internal.h"\n'},
                              "apps/train.cpp:1", "includes the internal header of layer 'ops'")

    def test_public_header_including_mpi_fails(self):
        self.assert_violation(
            {"include/lockstep/distribute/collective.h": "#pragma once\n#include <mpi.h>\n"},
            "include/lockstep/distribute/collective.h:2", "includes MPI")

    def test_public_header_including_the_whole_of_json_fails(self):
        self.assert_violation(
            {"include/lockstep/keras/losses.h": "#pragma once\n#include <nlohmann/json.hpp>\n"},
            "include/lockstep/keras/losses.h:2", "the whole of nlohmann/json")

    def test_public_header_including_onednn_fails(self):
        self.assert_violation(
            {"include/lockstep/ops/linear.h": "#pragma once\n#  include <dnnl.hpp>\n"},
            "include/lockstep/ops/linear.h:2", "includes oneDNN")

    def test_every_violation_is_reported(self):
        code, output = self.run_checker({
            "src/core/a.cpp": '#include "lockstep/ops/matmul.h"\n',
            "src/data/b.cpp": '#include "lockstep/distribute/strategy.h"\n'
                              '#include "lockstep/keras/layer.h"\n',
        })
        self.assertEqual(code, 1, output)
        self.assertIn("3 layering violation(s)", output)

    def test_a_directory_without_sources_is_an_error_not_a_pass(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "include"))
            result = subprocess.run([sys.executable, CHECKER, root], capture_output=True,
                                    text=True, check=False)
            self.assertEqual(result.returncode, 2, result.stdout + result.stderr)


if __name__ == "__main__":
    unittest.main()
