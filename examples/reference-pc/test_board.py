"""Tests of board.py (the frame codec and Board) against sim_board.py on a real
pseudo-terminal. Stdlib and pyserial (Debian: python3-serial) only:

    python3 -m unittest examples/reference-pc/test_board.py -v

The conversation tests need pyserial: without it they fail. They wait
for events (callbacks, the simulator's stdout lines) with generous timeouts;
nothing is asserted after a fixed sleep.
"""
import logging
import os
import re
import subprocess
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import board  # noqa: E402

import serial  # noqa: F401,E402  Debian: python3-serial. Missing, these tests fail and say so.

TIMEOUT = 15.0  # seconds; a wait that runs out fails the test
LOG = logging.getLogger("test-board")  # the board's log lines stay out of the test output
LOG.addHandler(logging.NullHandler())
LOG.propagate = False


def frame(hex_text):
    return bytes.fromhex(hex_text)


class CodecTests(unittest.TestCase):
    def test_frames_from_the_sources(self):
        # zegodev/ZegoWaWaJi XWawaji.java (status query, reset, forward, drop) and
        # Android-WaWaJiServer/doc/说明.txt (a move with message id 1); the xuebaodev
        # wiki's v3.4 start frame.
        self.assertEqual(board.encode(board.STATUS), frame("fe 00 00 01 ff ff 09 34 3d"))
        self.assertEqual(board.encode(board.RESET), frame("fe 00 00 01 ff ff 09 38 41"))
        self.assertEqual(board.encode(board.MOVE, [0, 0x9B, 0x13]), frame("fe 00 00 01 ff ff 0c 32 00 9b 13 24"))
        self.assertEqual(board.encode(board.MOVE, [4, 0, 0]), frame("fe 00 00 01 ff ff 0c 32 04 00 00 42"))
        self.assertEqual(board.encode(board.MOVE, [0, 0x2C, 0x01], seq=1), frame("fe 00 01 01 ff fe 0c 32 00 2c 01 07"))
        self.assertEqual(board.encode(board.START, [0x3C, 0, 1, 1, 1, 1, 0]),
                         frame("fe 00 00 01 ff ff 10 31 3c 00 01 01 01 01 00 1d"))
        self.assertEqual(board.encode(board.START, [0x3C] + [0] * 10),
                         frame("fe 00 00 01 ff ff 14 31 3c 00 00 00 00 00 00 00 00 00 00 1d"))

    def test_round_trip(self):
        cases = [(board.STATUS, b"", 0), (board.RESULT, b"\x01", 1), (board.FAULT, bytes([106]), 0x1234),
                 (board.START, bytes(range(11)), 0xFFFF), (0x7F, bytes(range(41)), 0xFE00)]
        decoder = board.Decoder()
        for command, data, seq in cases:
            raw = board.encode(command, data, seq)
            self.assertEqual(raw[6], len(raw))
            self.assertLess(raw[-1], 100)
            self.assertEqual(decoder.feed(raw), [board.Frame(command, data, seq)])
        self.assertEqual((decoder.frames, decoder.dropped, decoder.skipped), (len(cases), 0, 0))

    def test_any_split_of_the_stream(self):
        stream = b"".join(board.encode(board.MOVE, [d, 0x88, 0x13], d) for d in range(6))
        for size in (1, 2, 3, 7, 13):
            decoder = board.Decoder()
            frames = []
            for start in range(0, len(stream), size):
                frames += decoder.feed(stream[start:start + size])
            self.assertEqual([f.data[0] for f in frames], list(range(6)), f"chunks of {size}")
            self.assertEqual(decoder.dropped, 0)

    def test_bad_checksum_is_dropped_and_counted(self):
        broken = bytearray(board.encode(board.RESULT, b"\x01", 7))
        broken[-1] = (broken[-1] + 1) % 100
        decoder = board.Decoder()
        frames = decoder.feed(bytes(broken) + board.encode(board.RESULT, b"\x00", 8))
        self.assertEqual(frames, [board.Frame(board.RESULT, b"\x00", 8)])
        self.assertEqual(decoder.dropped, 1)

    def test_impossible_length_is_dropped(self):
        good = board.encode(board.HEARTBEAT, b"", 3)
        for length in (0, 1, 8, 51, 200, 255):
            bad = bytearray(board.encode(board.HEARTBEAT, b"", 2))
            bad[6] = length
            decoder = board.Decoder()
            self.assertEqual(decoder.feed(bytes(bad) + good), [board.Frame(board.HEARTBEAT, b"", 3)], f"length {length}")
            self.assertEqual(decoder.dropped, 1, f"length {length}")

    def test_wrong_complements_are_dropped(self):
        bad = bytearray(board.encode(board.HEARTBEAT, b"", 0x1020))  # no FE among the complements
        bad[5] ^= 0x10
        decoder = board.Decoder()
        self.assertEqual(decoder.feed(bytes(bad) + board.encode(board.HEARTBEAT)), [board.Frame(board.HEARTBEAT, b"", 0)])
        self.assertEqual(decoder.dropped, 1)

    def test_garbage_before_a_frame_is_skipped(self):
        decoder = board.Decoder()
        garbage = b"\x00\x13hello\xff\x01"
        self.assertEqual(decoder.feed(garbage + board.encode(board.RESULT, b"\x01")), [board.Frame(board.RESULT, b"\x01", 0)])
        self.assertEqual((decoder.skipped, decoder.dropped), (len(garbage), 0))

    def test_a_frame_behind_a_cut_off_one_is_kept(self):
        # A frame cut off after its length byte (it claims 20 bytes): the decoder
        # waits for 20, finds the sum wrong, and finds the good frames inside.
        cut = board.encode(board.START, bytes(11))[:9]
        good = board.encode(board.RESULT, b"\x01", 5) + board.encode(board.FAULT, bytes([109]), 6)
        decoder = board.Decoder()
        frames = decoder.feed(cut + good + board.encode(board.HEARTBEAT))
        self.assertEqual([f.command for f in frames], [board.RESULT, board.FAULT, board.HEARTBEAT])
        self.assertEqual(decoder.dropped, 1)

    def test_nothing_raises_on_noise(self):
        decoder = board.Decoder()
        noise = bytes((i * 131 + 7) % 256 for i in range(5000)) + b"\xfe" * 100
        decoder.feed(noise)
        self.assertEqual(decoder.feed(board.encode(board.RESULT, b"\x01", 9) * 2)[-1], board.Frame(board.RESULT, b"\x01", 9))

    def test_encode_refuses_what_no_frame_holds(self):
        with self.assertRaises(ValueError):
            board.encode(board.START, bytes(42))
        with self.assertRaises(ValueError):
            board.encode(0x100)

    def test_fault_codes(self):
        self.assertEqual(board.fault_code(106)[0], "claw_rise_timeout")
        self.assertEqual(board.fault_code(109)[0], "prize_sensor")
        self.assertEqual(board.fault_code(104)[0], "gantry_home_timeout")
        self.assertEqual(board.fault_code(103)[0], "motor_overcurrent")
        self.assertEqual(board.fault_code(107)[0], "board_107")
        self.assertEqual(board.board_number("claw_rise_timeout"), 101)
        self.assertEqual(board.board_number("board_77"), 77)
        self.assertIsNone(board.board_number("claw_coil"))


class Sim:
    """sim_board.py as a child process; its stdout lines are kept for waiting on."""

    def __init__(self, *args):
        self.process = subprocess.Popen([sys.executable, os.path.join(HERE, "sim_board.py"), *args],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        first = self.process.stdout.readline().split()
        assert first[:1] == ["pty"], f"sim_board said {first!r}"
        self.path = first[1]
        self.lines, self.changed = [], threading.Condition()
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()

    def _pump(self):
        for line in self.process.stdout:
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()

    def mark(self):
        with self.changed:
            return len(self.lines)

    def expect(self, pattern, since=0, timeout=TIMEOUT):
        """The first line from index `since` on matching the regex `pattern`."""
        regex = re.compile(pattern)
        with self.changed:
            found = []

            def match():
                found[:] = [line for line in self.lines[since:] if regex.search(line)]
                return found

            if not self.changed.wait_for(match, timeout):
                raise AssertionError(f"sim_board never said /{pattern}/; it said {self.lines[since:]}")
            return found[0]

    def control(self, line):
        since = self.mark()
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        self.expect("^ok " + re.escape(line), since)

    def stop(self):
        try:
            self.process.stdin.write("quit\n")
            self.process.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.pump.join(5)
        self.process.stdout.close()


class Events:
    """Callbacks recorded as (kind, args), to wait on."""

    def __init__(self):
        self.items, self.changed = [], threading.Condition()

    def recorder(self, kind):
        def record(*args):
            with self.changed:
                self.items.append((kind, args))
                self.changed.notify_all()
        return record

    def mark(self):
        with self.changed:
            return len(self.items)

    def wait(self, kind, since=0, predicate=lambda args: True, timeout=TIMEOUT):
        with self.changed:
            found = []

            def match():
                found[:] = [args for k, args in self.items[since:] if k == kind and predicate(args)]
                return found

            if not self.changed.wait_for(match, timeout):
                raise AssertionError(f"no {kind} event; events were {self.items[since:]}")
            return found[0]

    def wait_count(self, kind, count, since=0, timeout=TIMEOUT):
        with self.changed:
            if not self.changed.wait_for(lambda: self.count(kind, since) >= count, timeout):
                raise AssertionError(f"{self.count(kind, since)} {kind} events, not {count}: {self.items[since:]}")

    def count(self, kind, since=0):
        with self.changed:
            return sum(1 for k, _ in self.items[since:] if k == kind)


POWERS = {"grab": 40, "top": 20, "move": 10, "max": 48}


class ConversationTests(unittest.TestCase):
    """board.Board ↔ sim_board.py over a real pseudo-terminal."""

    def setUp(self):
        self.sim = Sim("--prize-power", "30", "--heartbeat", "0.2", "--home-time", "0.2", "--grab-time", "0.1",
                       "--verbose")
        self.addCleanup(self.sim.stop)
        self.events = Events()
        self.board = board.Board(self.sim.path, heartbeat_interval=0.2, silent_after=1.5, move_ms=5000, log=LOG)
        for kind in ("result", "fault", "ready", "silent", "alive", "status", "drop"):
            setattr(self.board, "on_" + kind, self.events.recorder(kind))
        self.board.open()
        self.addCleanup(self.board.close)
        self.events.wait("status")  # the board answers

    def test_start_move_grab_result(self):
        since = self.sim.mark()
        self.assertTrue(self.board.start(30, POWERS, strong=False, lift_height=5))
        self.sim.expect(r"^rx start time=30 strong=0 grab=40 top=20 move=10 max=48 height=5$", since)
        self.board.move("right")
        self.sim.expect(r"^rx move right$", since)
        self.board.move("up")
        self.sim.expect(r"^rx move back$", since)
        self.board.move("stop")
        self.sim.expect(r"^rx stop$", since)
        self.sim.expect(r"^pos \d+ \d+$", since)
        events = self.events.mark()
        self.board.grab()
        self.sim.expect(r"^grab power=40 strong=0$", since)
        self.assertEqual(self.events.wait("result", events), (True, 1))

    def test_a_weak_grab_loses_and_strong_wins(self):
        events, since = self.events.mark(), self.sim.mark()
        self.board.start(30, dict(POWERS, grab=10), strong=False)
        self.sim.expect(r"^rx start .* grab=10 ", since)
        self.board.grab()
        self.assertEqual(self.events.wait("result", events), (False, 0))
        events, since = self.events.mark(), self.sim.mark()
        self.board.start(30, dict(POWERS, grab=10), strong=True)
        self.sim.expect(r"^rx start time=30 strong=1 ", since)
        self.board.grab()
        self.sim.expect(r"^grab power=48 strong=1$", since)
        self.assertEqual(self.events.wait("result", events), (True, 1))

    def test_the_board_grabs_when_the_game_time_is_up(self):
        events, since = self.events.mark(), self.sim.mark()
        self.board.start(1, POWERS)
        self.sim.expect(r"^time up$", since)
        self.assertEqual(self.events.wait("result", events), (True, 1))

    def test_fault_refused_start_reset_ready(self):
        events = self.events.mark()
        self.sim.control("fault 106")
        self.assertEqual(self.events.wait("fault", events)[:2], (106, "claw_rise_timeout"))
        # Its status names the fault from now on: not reported again.
        self.events.wait("status", events, lambda args: args == (106,))
        self.assertEqual(self.events.count("fault", events), 1)
        # A board in fault refuses a game, saying its fault again.
        since = self.sim.mark()
        self.board.start(30, POWERS)
        self.sim.expect(r"^refused start \(fault 106\)$", since)
        self.events.wait_count("fault", 2, events)
        self.assertEqual(self.board.fault, 106)
        # Reset: the gantry goes home, the board is ready and plays again.
        self.board.reset()
        self.sim.expect(r"^rx reset$", since)
        self.events.wait("ready", events)
        self.sim.expect(r"^homed$", since)
        self.assertIsNone(self.board.fault)
        self.board.start(30, POWERS)
        self.sim.expect(r"^rx start ", since)

    def test_a_fault_by_its_code_and_an_unknown_one(self):
        events = self.events.mark()
        self.sim.control("fault prize_sensor")
        self.assertEqual(self.events.wait("fault", events)[:2], (109, "prize_sensor"))
        self.sim.control("fault 77")
        self.assertEqual(self.events.wait("fault", events, lambda args: args[0] == 77)[1], "board_77")

    def test_a_silent_board_and_its_return(self):
        events = self.events.mark()
        self.sim.control("silent on")
        seconds = self.events.wait("silent", events)[0]
        self.assertGreaterEqual(seconds, 1.5)
        self.sim.control("silent off")
        self.events.wait("alive", events)

    def test_broken_frames_are_dropped_counted_and_survived(self):
        events, dropped = self.events.mark(), self.board.dropped
        self.sim.control("noise 40")
        self.sim.control("corrupt")
        self.events.wait("drop", events)
        self.assertEqual(self.board.dropped, dropped + 1)
        # The conversation goes on: a game plays to its result.
        self.board.start(30, POWERS)
        self.board.grab()
        self.assertEqual(self.events.wait("result", events), (True, 1))

    def test_the_board_drops_broken_frames_from_the_pc(self):
        since = self.sim.mark()
        with self.board._write_lock:  # a status query with a bad sum, behind two stray bytes
            self.board._port.write(b"\x00\x01" + frame("fe 00 00 01 ff ff 09 34 3e"))
        self.sim.expect(r"^dropped 1$", since)
        self.board.start(30, POWERS)
        self.sim.expect(r"^rx start ", since)


if __name__ == "__main__":
    unittest.main()
