"""The shared-memory parameter channel: newest wins, never torn, sleeps until woken."""
import time

import numpy as np
import psutil
import pytest

from async_plotter.channel import ParentGone
from async_plotter.channel.shm import SharedMemoryReader, SharedMemoryWriter
from async_plotter.processes import spawn_context, start_process


def test_reader_gets_only_the_newest_update():
    writer = SharedMemoryWriter(100, np.float32)
    reader = SharedMemoryReader(writer.name, writer.wake_reader)
    try:
        assert reader.wait(timeout=0.05) is None
        for value in range(10):
            writer.publish(np.full(100, value, np.float32), iteration=value, max_path_length=7)
        update = reader.wait(timeout=1.0)
        assert update.number == 9 and update.iteration == 9 and update.max_path_length == 7
        assert np.all(update.params == 9)
        assert reader.wait(timeout=0.05) is None  # nothing newer: skipped ones are not queued
    finally:
        reader.close()
        writer.close()


def test_float64_and_no_iteration_round_trip():
    writer = SharedMemoryWriter(5, np.float64)
    reader = SharedMemoryReader(writer.name, writer.wake_reader)
    try:
        params = np.linspace(0, 1, 5)
        writer.publish(params, iteration=None, max_path_length=3)
        update = reader.wait(timeout=1.0)
        assert update.iteration is None and update.params.dtype == np.float64
        np.testing.assert_array_equal(update.params, params)
    finally:
        reader.close()
        writer.close()


def _read_until(name, wake_reader, last_value, results):
    reader = SharedMemoryReader(name, wake_reader)
    torn = seen = 0
    started = time.process_time()
    idle_cpu = None
    while True:
        try:
            update = reader.wait(timeout=5.0)
        except ParentGone:
            break
        if update is None:
            break
        seen += 1
        if not np.all(update.params == update.params[0]):
            torn += 1
        if update.params[0] == last_value:
            # Now idle: nothing more comes for a while. Sleeping must cost (almost) no CPU.
            before = time.process_time()
            reader.wait(timeout=1.0)
            idle_cpu = time.process_time() - before
            break
    results.send((seen, torn, float(update.params[0]) if update is not None else None, idle_cpu,
                  time.process_time() - started))


def test_concurrent_reader_never_sees_a_torn_vector_and_sleeps_when_idle():
    size, count = 2_000_000, 300  # 8 MB vectors, so copies overlap with writes
    writer = SharedMemoryWriter(size, np.float32)
    results_in, results_out = spawn_context().Pipe(duplex=False)
    process = start_process(_read_until, (writer.name, writer.wake_reader, count - 1, results_out))
    try:
        vector = np.empty(size, np.float32)
        for value in range(count):
            vector.fill(value)
            writer.publish(vector, iteration=value, max_path_length=10)
        assert results_in.poll(30), "reader did not finish"
        seen, torn, last, idle_cpu, _ = results_in.recv()
        assert torn == 0
        assert last == count - 1, "the reader must end on the newest update"
        assert 1 <= seen <= count
        assert idle_cpu is not None and idle_cpu < 0.05, f"idle reader burned {idle_cpu} s CPU"
    finally:
        process.join(10)
        writer.close()
    assert process.exitcode == 0


def _wait_forever(name, wake_reader, results):
    reader = SharedMemoryReader(name, wake_reader)
    results.send("attached")
    try:
        reader.wait(timeout=None)
        results.send("updated")
    except ParentGone:
        results.send("parent gone")


def test_reader_learns_that_the_writer_closed():
    writer = SharedMemoryWriter(10, np.float32)
    results_in, results_out = spawn_context().Pipe(duplex=False)
    process = start_process(_wait_forever, (writer.name, writer.wake_reader, results_out))
    assert results_in.poll(30) and results_in.recv() == "attached"
    time.sleep(0.2)  # let it fall asleep in select
    writer.close()
    assert results_in.poll(10)
    assert results_in.recv() == "parent gone"
    process.join(5)
    assert process.exitcode == 0
    assert not psutil.pid_exists(process.pid) or process.exitcode is not None


def test_writer_rejects_unsupported_dtype():
    with pytest.raises(ValueError, match="int32"):
        SharedMemoryWriter(10, np.int32)
