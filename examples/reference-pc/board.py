"""A claw machine's mainboard on a serial port: the FE-framed board protocol.

The protocol is the one of the XueBao (雪暴) claw machine mainboards, also
spoken by the boards the ZEGO claw-machine server drives (README.md, "The
board protocol", says where each part comes from). A frame is

    FE  id_hi id_lo  01  ~id_hi ~id_lo  len  cmd  data…  sum

- bytes 0–2 are the header byte FE and a 16-bit message id (high byte
  first); bytes 3–5 are their bitwise complements (01 = ~FE);
- `len` is the length of the whole frame, header and sum included: 9 for a
  frame without data, at most 50;
- `sum` is the sum of the bytes from `len` up to the last data byte, modulo
  100 (decimal: the sum byte is always 0–99).

The board echoes every command it is sent except the status query (0x34),
which it answers with its status. `Decoder` turns a byte stream into frames,
dropping (and counting) what is not a frame; `Board` drives a board over a
pyserial port (Debian: python3-serial), imported only when a port is opened.
"""
import logging
import threading
import time
from collections import namedtuple

HEADER = 0xFE
MIN_LENGTH = 9   # 6 header bytes, length, command, sum
MAX_LENGTH = 50  # longer frames are line noise (the vendor's own reader says so)

# Command bytes.
START = 0x31      # PC → board: a game starts (coin): game time, strong, powers, …
MOVE = 0x32       # PC → board: move / stop / grab (the drop is direction 4)
RESULT = 0x33     # board → PC: the game is over, data[0] 1 = prize, 0 = none
STATUS = 0x34     # PC → board: status query (no data); board → PC: its status
HEARTBEAT = 0x35  # board → PC: the board is alive
FAULT = 0x37      # board → PC: a fault, data[0] the board's fault number
RESET = 0x38      # PC → board: reset, send the gantry home

# Directions of MOVE (its data: direction, then the move time in ms, low byte first).
FRONT, BACK, LEFT, RIGHT, DROP, STOP = 0, 1, 2, 3, 4, 5
DIRECTION_NAMES = {FRONT: "front", BACK: "back", LEFT: "left", RIGHT: "right", DROP: "grab", STOP: "stop"}
# The gateway's directions are the player's, looking from the front camera:
# `up` is away from the player, to the back of the cabinet.
DIRECTIONS = {"up": BACK, "down": FRONT, "left": LEFT, "right": RIGHT, "stop": STOP}

# The first data byte of a STATUS reply: 0, 1, 2 are normal, anything else is
# the number of a fault (see FAULTS).
IDLE, PLAYING, BUSY = 0, 1, 2
NORMAL_STATES = (IDLE, PLAYING, BUSY)

# The board's fault numbers → (the code the PC publishes, text). The gateway
# documents the codes (docs/PROTOCOL.md, "Faults, maintenance and reset").
FAULTS = {
    101: ("claw_rise_timeout", "board fault 101: up/down motor fault, gantry not connected, or rise limit switch fault"),
    103: ("motor_overcurrent", "board fault 103: left/right motor fault"),
    104: ("gantry_home_timeout", "board fault 104: front/back motor fault or back limit switch fault"),
    105: ("motor_overcurrent", "board fault 105: drop limit switch broken or up/down motor fault"),
    106: ("claw_rise_timeout", "board fault 106: rise limit switch fault"),
    108: ("gantry_home_timeout", "board fault 108: front/back motor fault or front limit switch fault"),
    109: ("prize_sensor", "board fault 109: the prize sensor (photo-eye) is blocked"),
}


def fault_code(number):
    """The (code, text) published for the board's fault `number`."""
    if number in FAULTS:
        return FAULTS[number]
    return f"board_{number}", f"board fault {number} (not a number the reference PC knows)"


def board_number(code):
    """The board fault number a published code comes from (the first one in FAULTS),
    for `board_<n>` that n; None when no board number maps to it."""
    for number, (name, _) in sorted(FAULTS.items()):
        if name == code:
            return number
    if code.startswith("board_") and code[6:].isdigit() and 0 < int(code[6:]) < 256:
        return int(code[6:])
    return None


def checksum(body):
    """The sum byte of a frame whose bytes from `len` to the last data byte are `body`."""
    return sum(body) % 100


def encode(command, data=b"", seq=0):
    """One frame: `command` with `data` (bytes or a list of ints 0–255) and message id `seq`."""
    data = bytes(data)
    length = MIN_LENGTH + len(data)
    if length > MAX_LENGTH:
        raise ValueError(f"{len(data)} data bytes: a frame holds at most {MAX_LENGTH - MIN_LENGTH}")
    if not 0 <= command <= 0xFF:
        raise ValueError(f"command {command} is not a byte")
    hi, lo = (seq >> 8) & 0xFF, seq & 0xFF
    frame = bytearray([HEADER, hi, lo, ~HEADER & 0xFF, ~hi & 0xFF, ~lo & 0xFF, length, command])
    frame += data
    frame.append(checksum(frame[6:]))
    return bytes(frame)


Frame = namedtuple("Frame", "command data seq")


class Decoder:
    """A byte stream in, frames out. A frame whose header complements are wrong,
    whose length is impossible (under 9 or over 50) or whose sum is wrong is
    dropped and counted; the decoder then looks for the next FE after that
    frame's first byte, so a good frame right behind a broken one is kept.
    Bytes before a frame start are skipped and counted. Never raises."""

    def __init__(self):
        self.buffer = bytearray()
        self.frames = 0    # good frames decoded
        self.dropped = 0   # broken frames dropped
        self.skipped = 0   # stray bytes skipped outside frames

    def feed(self, chunk):
        self.buffer += chunk
        frames = []
        buffer = self.buffer
        while buffer:
            start = buffer.find(HEADER)
            if start < 0:
                self.skipped += len(buffer)
                buffer.clear()
                break
            if start:
                self.skipped += start
                del buffer[:start]
            if len(buffer) < 7:
                break  # wait for the length byte
            if buffer[3] != (~HEADER & 0xFF) or buffer[4] != (~buffer[1] & 0xFF) or buffer[5] != (~buffer[2] & 0xFF):
                self._drop()
                continue
            length = buffer[6]
            if not MIN_LENGTH <= length <= MAX_LENGTH:
                self._drop()
                continue
            if len(buffer) < length:
                break  # wait for the rest
            if checksum(buffer[6:length - 1]) != buffer[length - 1]:
                self._drop()
                continue
            frames.append(Frame(buffer[7], bytes(buffer[8:length - 1]), (buffer[1] << 8) | buffer[2]))
            self.frames += 1
            del buffer[:length]
        return frames

    def _drop(self):
        self.dropped += 1
        del self.buffer[:1]  # resynchronise on the next FE


def _call(log, callback, *args):
    """Run a callback; an exception in it is logged, never raised into the reader."""
    if callback is None:
        return
    try:
        callback(*args)
    except Exception:  # noqa: BLE001 - a callback must not stop the board
        log.exception("board: a callback failed")


class Board:
    """A mainboard on the serial port `path`.

    Commands: `start`, `move`, `grab`, `reset`, `query_status` (return False
    when the port is not open). Callbacks, all called on the reader thread
    (return quickly; exceptions are logged):

    - on_result(won, value): the board's result frame (value: its data byte);
    - on_fault(number, code, text): a fault frame, or a status naming a fault
      other than the one already reported;
    - on_ready(): after `reset`, the board says it is idle again (gantry home);
    - on_silent(seconds): nothing heard from the board for `silent_after` s;
    - on_alive(): frames again after on_silent;
    - on_status(state): every status frame (its first data byte);
    - on_drop(total): a broken frame was dropped (total so far).

    A thread polls the board's status every `heartbeat_interval` seconds
    (the board answers; it also sends heartbeats of its own). Broken frames
    are counted and logged at most every `drop_log_interval` seconds. A port
    that fails is closed and opened again every second.
    """

    def __init__(self, path, baud=115200, *, heartbeat_interval=1.0, silent_after=5.0, move_ms=5000,
                 drop_log_interval=10.0, reset_echo_grace=2.0, log=None):
        self.path, self.baud = path, baud
        self.heartbeat_interval, self.silent_after = heartbeat_interval, silent_after
        self.move_ms, self.drop_log_interval, self.reset_echo_grace = move_ms, drop_log_interval, reset_echo_grace
        self.log = log or logging.getLogger("claw-pc")
        self.on_result = self.on_fault = self.on_ready = None
        self.on_silent = self.on_alive = self.on_status = self.on_drop = None
        self.decoder = Decoder()
        self.fault = None        # the board's fault number while it reports one
        self.state = None        # the last status byte the board reported
        self.last_heard = None   # time.monotonic() of the last good frame
        self.silent = False
        self._port = None
        self._seq = 0
        self._write_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = []
        self._awaiting_ready = False
        self._reset_echoed = False
        self._reset_at = 0.0
        self._drops_reported = 0
        self._drop_logged_at = None
        self._drop_lock = threading.Lock()

    # --- The port -------------------------------------------------------------

    def _open_port(self):
        import serial  # Debian: python3-serial
        return serial.Serial(self.path, self.baud, timeout=0.1, write_timeout=1.0)

    def open(self):
        """Open the port (raises if it cannot) and start the reader and heartbeat threads."""
        self._port = self._open_port()
        self.last_heard = time.monotonic()
        self.log.info("board: opened %s at %d baud", self.path, self.baud)
        for target, name in ((self._read_loop, "board-reader"), (self._heartbeat_loop, "board-heartbeat")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def close(self):
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2)
        port, self._port = self._port, None
        if port is not None:
            try:
                port.close()
            except Exception:  # noqa: BLE001
                pass
        self._report_drops(force=True)

    @property
    def dropped(self):
        return self.decoder.dropped

    def _send(self, command, data=b"", quiet=False):
        port = self._port
        if port is None:
            (self.log.debug if quiet else self.log.warning)("board: the port is not open; 0x%02X not sent", command)
            return False
        with self._write_lock:
            self._seq = self._seq % 0xFFFF + 1  # consecutive ids always differ
            frame = encode(command, data, self._seq)
            try:
                port.write(frame)
                return True
            except Exception as error:  # noqa: BLE001 - serial.SerialException, OSError, timeouts
                self.log.warning("board: writing 0x%02X failed: %s", command, error)
                return False

    # --- Commands ---------------------------------------------------------------

    def start(self, game_time, powers, strong=False, lift_height=0):
        """A game starts. powers: grab, top, move, max (0–48 each; 0 = the board's
        own setting). game_time: seconds before the board grabs by itself (1–255;
        more is sent as 255). strong: the board's full-power grab (its max
        power; the powers are then ignored by the board). Raises ValueError."""
        values = []
        for name in ("grab", "top", "move", "max"):
            value = int(powers.get(name, 0) or 0)
            if not 0 <= value <= 48:
                raise ValueError(f"claw {name} power {value} is not 0 to 48")
            values.append(value)
        if not 0 <= int(lift_height) <= 10:
            raise ValueError(f"lift_height {lift_height} is not 0 to 10")
        game_time = int(game_time)
        if game_time < 1:
            raise ValueError(f"game_time {game_time} is not a positive number of seconds")
        if game_time > 255:
            self.log.warning("board: game_time %d s is more than the board's 255 s; it gets 255", game_time)
            game_time = 255
        # The v3.4 start frame: time, strong, grab, top, move, max, lift height,
        # then line length and the three motor speeds, 0 = the board's own.
        data = [game_time, 1 if strong else 0, *values, int(lift_height), 0, 0, 0, 0]
        return self._send(START, data)

    def move(self, direction):
        """up, down, left, right (move for move_ms or until stop) or stop. Raises ValueError."""
        if direction not in DIRECTIONS:
            raise ValueError(f"unknown direction {direction!r}")
        code = DIRECTIONS[direction]
        ms = 0 if code == STOP else self.move_ms
        return self._send(MOVE, [code, ms & 0xFF, (ms >> 8) & 0xFF])

    def grab(self):
        """Drop the claw; the board answers with a result frame when the claw is back."""
        return self._send(MOVE, [DROP, 0, 0])

    def reset(self):
        """Send the gantry home; on_ready is called when the board is idle again."""
        self._awaiting_ready = True
        self._reset_echoed = False
        self._reset_at = time.monotonic()
        return self._send(RESET)

    def query_status(self, quiet=False):
        return self._send(STATUS, quiet=quiet)

    # --- Reading ----------------------------------------------------------------

    def _read_loop(self):
        while not self._stop.is_set():
            port = self._port
            if port is None:
                try:
                    self._port = self._open_port()
                    self.log.info("board: %s open again", self.path)
                except Exception as error:  # noqa: BLE001
                    self.log.debug("board: cannot open %s yet: %s", self.path, error)
                    self._stop.wait(1.0)
                continue
            try:
                chunk = port.read(max(1, port.in_waiting))
            except Exception as error:  # noqa: BLE001 - the board went away (EIO on a pty, unplugged USB)
                self.log.warning("board: reading %s failed (%s); opening it again", self.path, error)
                self._port = None
                try:
                    port.close()
                except Exception:  # noqa: BLE001
                    pass
                self._stop.wait(1.0)
                continue
            if not chunk:
                continue
            dropped = self.decoder.dropped
            for frame in self.decoder.feed(chunk):
                try:
                    self._handle(frame)
                except Exception:  # noqa: BLE001 - a frame must never stop the reader
                    self.log.exception("board: handling frame 0x%02X failed", frame.command)
            if self.decoder.dropped != dropped:
                _call(self.log, self.on_drop, self.decoder.dropped)
                self._report_drops()

    def _handle(self, frame):
        now = time.monotonic()
        self.last_heard = now
        if self.silent:
            self.silent = False
            self.log.info("board: answering again")
            _call(self.log, self.on_alive)
        command, data = frame.command, frame.data
        if command == RESULT:
            value = data[0] if data else 0
            self.log.info("board: result %s (%d)", "prize" if value == 1 else "no prize", value)
            _call(self.log, self.on_result, value == 1, value)
        elif command == FAULT:
            self._fault(data[0] if data else 0, repeat=True)
        elif command == STATUS:
            state = data[0] if data else IDLE
            self.state = state
            if state in NORMAL_STATES:
                if self.fault is not None and not self._awaiting_ready:
                    self.log.info("board: status normal again (fault %d no longer reported)", self.fault)
                    self.fault = None
                if state == IDLE and self._awaiting_ready and (
                        self._reset_echoed or now - self._reset_at >= self.reset_echo_grace):
                    self._awaiting_ready = False
                    self.fault = None
                    self.log.info("board: ready (gantry home)")
                    _call(self.log, self.on_ready)
            else:
                self._fault(state, repeat=False)
            _call(self.log, self.on_status, state)
        elif command == RESET:
            self._reset_echoed = True  # the echo: statuses from now on are after the reset
        elif command in (HEARTBEAT, START, MOVE):
            pass  # a heartbeat, or the echo of a command
        else:
            self.log.debug("board: frame 0x%02X %s ignored", command, data.hex())

    def _fault(self, number, repeat):
        """A fault frame is reported every time (the board refusing a start says its
        fault again); a status naming a fault only when the fault is new."""
        if not repeat and number == self.fault:
            return
        self.fault = number
        code, text = fault_code(number)
        self.log.warning("board: fault %d (%s)", number, code)
        _call(self.log, self.on_fault, number, code, text)

    # --- Heartbeat --------------------------------------------------------------

    def _heartbeat_loop(self):
        while not self._stop.wait(self.heartbeat_interval):
            self.query_status(quiet=True)
            heard = self.last_heard
            if heard is not None and not self.silent and time.monotonic() - heard >= self.silent_after:
                self.silent = True
                seconds = time.monotonic() - heard
                self.log.warning("board: silent for %.1f s", seconds)
                _call(self.log, self.on_silent, seconds)
            self._report_drops()

    def _report_drops(self, force=False):
        """Log broken frames: the first at once, then at most every drop_log_interval s."""
        with self._drop_lock:
            pending = self.decoder.dropped - self._drops_reported
            if pending <= 0:
                return
            now = time.monotonic()
            if not (force or self._drop_logged_at is None or now - self._drop_logged_at >= self.drop_log_interval):
                return
            self._drops_reported = self.decoder.dropped
            self._drop_logged_at = now
        self.log.warning("board: dropped %d broken frame(s) (%d in all, %d stray bytes skipped)",
                         pending, self.decoder.dropped, self.decoder.skipped)
