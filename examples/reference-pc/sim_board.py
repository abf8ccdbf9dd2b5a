#!/usr/bin/env python3
"""A simulated claw machine mainboard on a pseudo-terminal, for claw_pc.py --serial
and the tests. It speaks the frames of board.py (README.md, "The board protocol").

    python3 sim_board.py [--link /tmp/claw-board] [--control /tmp/claw-board.ctl]

The first line on stdout is `pty <path of the terminal>` (the --link symlink,
if asked for, exists by then): open that path as the board's serial port.
Every later line is one event (README.md, "The simulated board"). Control
lines (`fault 106`, `reset`, `silent on`, …) are read from stdin and, with
--control, from a FIFO made at that path; each is answered `ok …` or
`error …` on stdout. Stdlib only.
"""
import argparse
import heapq
import itertools
import os
import select
import signal
import stat
import sys
import time
import tty

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import board as proto  # noqa: E402 - the codec; board.py imports pyserial only to open a port

STATE_NAMES = {proto.IDLE: "idle", proto.PLAYING: "playing", proto.BUSY: "busy"}
MOVES = {proto.FRONT: (0, -1), proto.BACK: (0, 1), proto.LEFT: (-1, 0), proto.RIGHT: (1, 0)}


def say(text):
    print(text, flush=True)


class Timer:
    def __init__(self, when, action):
        self.when, self.action, self.cancelled = when, action, False

    def cancel(self):
        self.cancelled = True


class LineReader:
    """Lines from an fd that select() said is readable."""

    def __init__(self, fd):
        self.fd, self.buffer = fd, b""

    def read(self):
        """The complete lines read, or None at end of file."""
        try:
            chunk = os.read(self.fd, 4096)
        except BlockingIOError:
            return []
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [line.decode("utf-8", "replace").strip() for line in lines]


class SimBoard:
    def __init__(self, args, master):
        self.args, self.master = args, master
        self.width, self.height = args.grid
        self.decoder = proto.Decoder()
        self.timers, self.counter = [], itertools.count()
        self.state, self.fault, self.silent = proto.IDLE, None, False
        self.x = self.y = 0
        self.game = None           # the start frame's settings while a game runs
        self.game_timer = self.move_timer = self.grab_timer = self.home_timer = None
        self.moving = None         # (direction, until) while the gantry moves
        self.seq = 0
        self.running = True
        if args.heartbeat > 0:
            self.after(args.heartbeat, self.heartbeat)

    # --- Timers -----------------------------------------------------------------

    def after(self, seconds, action):
        timer = Timer(time.monotonic() + seconds, action)
        heapq.heappush(self.timers, (timer.when, next(self.counter), timer))
        return timer

    def next_timeout(self):
        while self.timers and self.timers[0][2].cancelled:
            heapq.heappop(self.timers)
        return max(0.0, self.timers[0][0] - time.monotonic()) if self.timers else None

    def run_timers(self):
        now = time.monotonic()
        while self.timers and self.timers[0][0] <= now:
            _, _, timer = heapq.heappop(self.timers)
            if not timer.cancelled:
                timer.action()

    @staticmethod
    def cancel(*timers):
        for timer in timers:
            if timer is not None:
                timer.cancel()

    # --- Frames out -------------------------------------------------------------

    def send(self, command, data=b""):
        if self.silent:
            return
        self.seq = self.seq % 0xFFFF + 1
        self.write(proto.encode(command, data, self.seq))

    def write(self, raw):
        try:
            os.write(self.master, raw)
        except BlockingIOError:
            pass  # nobody reads the terminal and its buffer is full: the bytes are lost, as on a wire
        except OSError as error:
            say(f"error write: {error}")

    def status_data(self):
        return [self.fault if self.fault is not None else self.state, 0, 0, 0, 0]

    def heartbeat(self):
        self.send(proto.HEARTBEAT)
        self.after(self.args.heartbeat, self.heartbeat)

    # --- Frames in --------------------------------------------------------------

    def receive(self, chunk):
        dropped = self.decoder.dropped
        frames = self.decoder.feed(chunk)
        if self.decoder.dropped != dropped:
            say(f"dropped {self.decoder.dropped}")
        if self.silent:
            return
        for frame in frames:
            self.handle(frame)

    def handle(self, frame):
        command, data = frame.command, frame.data
        echo = proto.encode(command, data, frame.seq)
        if command == proto.STATUS:
            if self.args.verbose:
                say("rx status")
            self.send(proto.STATUS, self.status_data())
        elif command == proto.START:
            self.start(data, echo)
        elif command == proto.MOVE:
            self.move(data, echo)
        elif command == proto.RESET:
            self.write(echo)
            say("rx reset")
            self.reset()
        else:
            say(f"rx unknown 0x{command:02x} {data.hex()}")

    def start(self, data, echo):
        if self.fault is not None:
            say(f"refused start (fault {self.fault})")
            self.send(proto.FAULT, [self.fault])
            return
        if self.state != proto.IDLE:
            say(f"ignored start ({STATE_NAMES[self.state]})")
            return
        if len(data) < 7:
            say(f"error start frame with {len(data)} data bytes")
            return
        self.write(echo)
        time_s, strong, grab, top, move, big, height = data[:7]
        self.game = {"strong": bool(strong), "grab": grab, "max": big}
        self.state = proto.PLAYING
        self.game_timer = self.after(max(1, time_s), self.time_up)
        say(f"rx start time={time_s} strong={strong} grab={grab} top={top} move={move} max={big} height={height}")

    def move(self, data, echo):
        if self.fault is not None:
            return  # a board in fault does nothing until it is reset
        self.write(echo)
        direction = data[0] if data else proto.STOP
        ms = (data[1] | (data[2] << 8)) if len(data) >= 3 else 0
        name = proto.DIRECTION_NAMES.get(direction, f"0x{direction:02x}")
        say(f"rx {'move ' + name if direction in MOVES else name}")
        if self.state != proto.PLAYING:
            return
        if direction == proto.DROP:
            self.drop()
        elif direction == proto.STOP:
            self.stop_moving()
        elif direction in MOVES:
            self.cancel(self.move_timer)
            self.moving = (direction, time.monotonic() + ms / 1000.0)
            self.move_timer = self.after(0, self.step)

    # --- The gantry and the claw ------------------------------------------------

    def step(self):
        direction, until = self.moving
        dx, dy = MOVES[direction]
        x, y = self.x + dx, self.y + dy
        if not (0 <= x < self.width and 0 <= y < self.height):
            self.stop_moving()  # at the edge: its limit switch stops the motor
            return
        self.x, self.y = x, y
        if time.monotonic() + self.args.step_ms / 1000.0 > until:
            self.stop_moving()  # the move time is up after this step
            return
        self.move_timer = self.after(self.args.step_ms / 1000.0, self.step)

    def stop_moving(self):
        self.cancel(self.move_timer)
        self.move_timer = None
        if self.moving is not None:
            self.moving = None
            say(f"pos {self.x} {self.y}")

    def time_up(self):
        say("time up")
        self.drop()

    def drop(self):
        self.stop_moving()
        self.cancel(self.game_timer)
        self.state = proto.BUSY
        game = self.game
        power = game["max"] if game["strong"] else game["grab"]
        power = power or self.args.board_power  # 0 = the board's own setting
        won = game["strong"] or power >= self.args.prize_power
        say(f"grab power={power} strong={int(game['strong'])}")
        self.grab_timer = self.after(self.args.grab_time, lambda: self.result(won))

    def result(self, won):
        self.x = self.y = 0  # the claw drops what it holds over the chute and stays there
        self.state, self.game = proto.IDLE, None
        say(f"tx result {int(won)}")
        self.send(proto.RESULT, [1 if won else 0])

    def abort(self):
        self.cancel(self.game_timer, self.move_timer, self.grab_timer, self.home_timer)
        self.moving, self.game = None, None

    def reset(self):
        self.abort()
        self.fault, self.state = None, proto.BUSY
        self.home_timer = self.after(self.args.home_time, self.homed)

    def homed(self):
        self.x = self.y = 0
        self.state = proto.IDLE
        say("homed")
        self.send(proto.STATUS, self.status_data())  # also unasked, so a PC need not poll

    # --- Control ----------------------------------------------------------------

    def control(self, line):
        words = line.split()
        if not words:
            return
        verb, rest = words[0].lower(), words[1:]
        try:
            reply = self.command(verb, rest)
        except (ValueError, IndexError) as error:
            say(f"error {line}: {error}")
            return
        say(f"ok {line}" + (f" {reply}" if reply else ""))

    def command(self, verb, rest):
        if verb == "fault":
            code = rest[0]
            number = int(code) if code.isdigit() else proto.board_number(code)
            if number is None or not 0 < number < 256:
                raise ValueError(f"no board fault number for {code}")
            if number in proto.NORMAL_STATES:
                raise ValueError(f"{number} is a normal state, not a fault")
            self.abort()
            self.fault, self.state = number, proto.IDLE
            say(f"tx fault {number}")
            self.send(proto.FAULT, [number])
        elif verb == "reset":
            self.reset()
        elif verb == "silent":
            if rest[0] not in ("on", "off"):
                raise ValueError("silent on|off")
            self.silent = rest[0] == "on"
        elif verb == "noise":
            count = int(rest[0]) if rest else 16
            self.write(bytes((i * 37 + 11) % 0xFE for i in range(count)))  # never FE: stray bytes only
        elif verb == "corrupt":
            frame = bytearray(proto.encode(proto.HEARTBEAT, b"", 0x5A5A))
            frame[-1] = (frame[-1] + 1) % 100
            self.write(bytes(frame))
        elif verb == "prize-power":
            self.args.prize_power = int(rest[0])
        elif verb == "state":
            state = f"fault {self.fault}" if self.fault is not None else STATE_NAMES[self.state]
            return f"{state} pos {self.x} {self.y}"
        elif verb == "quit":
            self.running = False
        else:
            raise ValueError("unknown command (fault, reset, silent, noise, corrupt, prize-power, state, quit)")
        return ""


def grid(text):
    width, _, height = text.lower().partition("x")
    width, height = int(width), int(height)
    if width < 1 or height < 1:
        raise argparse.ArgumentTypeError("a grid is WxH, both at least 1")
    return width, height


def main():
    parser = argparse.ArgumentParser(description="A simulated claw machine mainboard on a pseudo-terminal.")
    parser.add_argument("--link", help="also make this symlink to the terminal (removed on exit)")
    parser.add_argument("--control", help="make a FIFO here and read control lines from it too")
    parser.add_argument("--prize-power", type=int, default=30,
                        help="a grab with at least this claw power (or strong) wins (default 30)")
    parser.add_argument("--board-power", type=int, default=24,
                        help="the power used when the start frame says 0, the board's own setting (default 24)")
    parser.add_argument("--home-time", type=float, default=0.2, help="seconds a reset takes (default 0.2)")
    parser.add_argument("--grab-time", type=float, default=0.3, help="seconds from the drop to the result (default 0.3)")
    parser.add_argument("--step-ms", type=int, default=100, help="ms the gantry takes for one cell (default 100)")
    parser.add_argument("--grid", type=grid, default=(10, 10), help="cells, WxH (default 10x10; home 0 0)")
    parser.add_argument("--heartbeat", type=float, default=1.0, help="seconds between heartbeats, 0 for none (default 1)")
    parser.add_argument("--verbose", action="store_true", help="also print every status query")
    args = parser.parse_args()

    stopping = []  # a signal asks the loop to end; the files made are removed on the way out
    wake_read, wake_write = os.pipe()  # and wakes select() at once
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: stopping.append(True))

    master, slave = os.openpty()
    tty.setraw(slave)  # no echo, no line editing, no newline translation, until a PC sets its own
    os.set_blocking(master, False)
    path = os.ttyname(slave)
    made, opened = [], [master, slave, wake_read, wake_write]
    try:
        if args.link:
            if os.path.islink(args.link):
                os.unlink(args.link)
            os.symlink(path, args.link)
            made.append(args.link)
        readers = {}
        if args.control:
            if not (os.path.exists(args.control) and stat.S_ISFIFO(os.stat(args.control).st_mode)):
                os.mkfifo(args.control)
                made.append(args.control)
            control_fd = os.open(args.control, os.O_RDONLY | os.O_NONBLOCK)
            opened += [control_fd, os.open(args.control, os.O_WRONLY)]  # the FIFO never reads as ended
            readers[control_fd] = LineReader(control_fd)
        readers[0] = LineReader(0)  # stdin
        sim = SimBoard(args, master)
        say(f"pty {path}")
        run(sim, master, wake_read, readers, stopping)
    finally:
        for name in made:
            try:
                os.unlink(name)
            except OSError:
                pass
        for fd in opened:
            os.close(fd)


def run(sim, master, wake_read, readers, stopping):
    while sim.running and not stopping:
        try:
            ready, _, _ = select.select([master, wake_read, *readers], [], [], sim.next_timeout())
        except InterruptedError:
            continue
        for fd in ready:
            if fd == wake_read:
                os.read(wake_read, 512)
            elif fd == master:
                try:
                    chunk = os.read(master, 4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""  # no process has the terminal open: nothing to read
                    time.sleep(0.05)
                if chunk:
                    sim.receive(chunk)
            else:
                lines = readers[fd].read()
                if lines is None:
                    del readers[fd]  # stdin ended: keep running, the FIFO (if any) still controls
                    continue
                for line in lines:
                    sim.control(line)
        if sim.running and not stopping:
            sim.run_timers()

if __name__ == "__main__":
    main()
