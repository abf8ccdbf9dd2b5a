#!/usr/bin/env python3
"""A reference machine PC for claw-gateway: one claw machine on MQTT.

Subscribes to the machine's control and camera topics, acknowledges every
command, drives the hardware through the stub functions below, and reports the
result of each grab. The topics and payloads: docs/TOPICS.md and
docs/PROTOCOL.md. Needs paho-mqtt 1.6 (Debian bookworm: python3-paho-mqtt) or 2.x.

    CLAW_PC_PASSWORD=... ./claw_pc.py --host broker.arcade.lan --tls-ca ca.crt --machine m1

With --serial PATH it drives a mainboard on that serial port instead of the
stubs (board.py; pyserial, Debian: python3-serial): the coin starts the board's
game with the coin's settings, moves and the grab become the board's frames,
the board's result, faults and silence are published (README.md).
"""
import argparse
import json
import logging
import os
import random
import re
import signal
import sys
import threading
import time

import paho.mqtt.client as mqtt

log = logging.getLogger("claw-pc")


# --- Hardware: replace these stubs with your machine's I/O. ------------------
# They are called from paho's network thread (drop_claw_and_wait_for_prize and
# home_gantry from a thread of their own): return quickly, or the next command
# waits. With --serial the board (board.py) does their work instead.

def move_claw(direction):
    """direction: up, down, left, right or stop."""
    print(f"[hardware] move claw {direction}", flush=True)


def switch_camera(camera):
    """camera: a camera id of this machine, e.g. "1" or "2"."""
    print(f"[hardware] switch to camera {camera}", flush=True)


def insert_coins(coins):
    """A new game starts: credit the machine with `coins` (a string, e.g. "1")."""
    print(f"[hardware] insert {coins} coin(s)", flush=True)


def drop_claw_and_wait_for_prize(result_delay, win_rate):
    """Drop the claw, wait for the prize chute, return True if a prize fell.
    The stand-in waits result_delay seconds and wins with probability win_rate."""
    print("[hardware] drop the claw", flush=True)
    time.sleep(result_delay)
    return random.random() < win_rate


def home_gantry():
    """Reset (1002): send the gantry home, wait until it is there, return True."""
    print("[hardware] home the gantry", flush=True)
    return True


# --- Protocol -----------------------------------------------------------------
MOVE, GRAB, CAMERA, RESULT, ACK, ADD_COINS, RESET = 1, 2, 3, 4, 5, 1001, 1002
RESULT_REPEAT = 2.0  # seconds between repeats of a result not confirmed on result/ack


def as_int(value):
    """A JSON integer or a numeric string (as the gateway reads them); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value):
        return int(value)
    return None


def as_text(value):
    """A JSON string, or a number kept as its string form; else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(int(value)) if float(value).is_integer() else str(value)
    return None


def decode(payload):
    """The command, data, serial, session and settings of a message, or None if unreadable."""
    try:
        message = json.loads(payload.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(message, dict) or as_int(message.get("command")) is None:
        return None
    return {"command": as_int(message["command"]), "data": as_text(message.get("data")),
            "serial": as_int(message.get("serial")), "session": as_text(message.get("session")),
            "settings": message.get("settings")}


def game_settings(settings):
    """The board's start from a coin's settings (docs/PROTOCOL.md, "The coin"):
    (game_time, powers, strong, lift_height). Without settings: 30 s and the
    board's own powers. Raises ValueError for a value out of its range."""
    if settings is None:
        return 30, {}, False, 0
    if not isinstance(settings, dict):
        raise ValueError("settings is not an object")
    game_time = as_int(settings.get("game_time", 30))
    if game_time is None or not 5 <= game_time <= 300:
        raise ValueError(f"game_time {settings.get('game_time')!r} is not 5 to 300 s")
    claw = settings.get("claw", {})
    if not isinstance(claw, dict):
        raise ValueError("claw is not an object")
    powers = {}
    for name in ("grab", "top", "move", "max"):
        if name in claw:
            power = as_int(claw[name])
            if power is None or not 1 <= power <= 48:
                raise ValueError(f"claw {name} {claw[name]!r} is not 1 to 48")
            powers[name] = power
    lift_height = as_int(settings.get("lift_height", 0))
    if lift_height is None or not 0 <= lift_height <= 10:
        raise ValueError(f"lift_height {settings.get('lift_height')!r} is not 0 to 10")
    strong = settings.get("strong", False)
    if not isinstance(strong, bool):
        raise ValueError(f"strong {strong!r} is not true or false")
    return game_time, powers, strong, lift_height


class ClawPC:
    def __init__(self, args, password):
        self.args = args
        base = f"{args.topic_prefix}/{args.machine}"
        self.control, self.state = f"{base}/control", f"{base}/state"
        self.ack, self.result = f"{base}/ack", f"{base}/result"
        self.result_ack = f"{base}/result/ack"
        # Results not confirmed yet by the gateway, by serial: (payload, give up at).
        # Serials start from this run's start time, a million a second: no run
        # of this PC reuses an earlier one's, without keeping a file.
        self.results_lock = threading.Lock()
        self.unconfirmed = {}
        self.next_serial = int(time.time()) * 1_000_000 + 1
        self.fault = f"{base}/fault"
        self.camera = args.camera_topic or f"{base}/camera"
        self.session = None  # the session of the game in progress (from 1001)
        self.board = None
        if args.serial:
            from board import Board  # board.py, next to this file
            self.board = Board(args.serial, args.baud, heartbeat_interval=min(1.0, args.board_timeout / 3),
                               silent_after=args.board_timeout, log=log)
            self.board.on_result = self.board_result
            self.board.on_fault = lambda number, code, text: self.publish_fault(code, text)
            self.board.on_silent = lambda seconds: self.publish_fault(
                "board_silent", f"the board has not answered for {seconds:.0f} s")
            self.board.on_ready = self.board_ready
        # The site broker binds client ids to usernames: use the username.
        if hasattr(mqtt, "CallbackAPIVersion"):  # paho-mqtt 2.x
            self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=args.username, protocol=mqtt.MQTTv5)
        else:  # paho-mqtt 1.x
            self.client = mqtt.Client(client_id=args.username, protocol=mqtt.MQTTv5)
        self.client.username_pw_set(args.username, password)
        if args.tls_ca:
            self.client.tls_set(ca_certs=args.tls_ca)
        # If this PC vanishes (crash, power, network) the broker says `offline`
        # for it: the gateway then stops sending commands and refuses players.
        self.client.will_set(self.state, "offline", qos=1, retain=True)
        self.client.on_connect = self.on_connect
        self.client.on_disconnect = self.on_disconnect
        self.client.on_message = self.on_message
        self.client.reconnect_delay_set(1, 10)

    def on_connect(self, client, userdata, flags, reason, properties=None):
        if reason != 0:
            log.error("broker refused the connection: %s", reason)
            return
        # Subscribe before saying online: the gateway sends commands as soon as it
        # reads `online`, and the broker handles our packets in order.
        client.subscribe(sorted({(self.control, 0), (self.camera, 0)}))
        # QoS 1: the gateway's word that a result is on disk must not be lost.
        client.subscribe(self.result_ack, qos=1)
        # Retained, so the gateway (also one started later) knows we are here.
        # Again on every reconnect: the will may have said offline meanwhile.
        client.publish(self.state, "online", qos=1, retain=True)
        log.info("connected to %s:%s as %s; online", self.args.host, self.args.port, self.args.username)

    def on_disconnect(self, client, userdata, *rest):
        # paho 1.x passes (rc, properties), 2.x (flags, reason, properties).
        log.warning("disconnected from the broker (%s)", rest[-2])

    def on_message(self, client, userdata, message):
        # A retained message is an old command someone left on the broker, not one
        # for the game now: acting on it could drop the claw on nobody's coin.
        if message.retain:
            log.warning("ignored a retained message on %s: %r", message.topic, message.payload[:200])
            return
        if message.topic == self.result_ack:
            self.result_confirmed(message.payload)
            return
        command = decode(message.payload)
        if command is None or command["serial"] is None:
            log.warning("ignored an unreadable message on %s: %r", message.topic, message.payload[:200])
            return
        log.info("received on %s: %s", message.topic, command)
        # Ack at once, before the hardware moves: the gateway times how long acks
        # take and flags a machine that misses several in a row.
        ack = {"command": ACK, "data": "ok", "serial": command["serial"]}
        client.publish(self.ack, json.dumps(ack, separators=(",", ":")), qos=1)

        code, data = command["command"], command["data"]
        if self.board is not None:
            self.drive_board(command)
        elif code == MOVE:
            move_claw(data)
        elif code == CAMERA:
            switch_camera(data)
        elif code == ADD_COINS:
            self.session = command["session"]  # a new game
            insert_coins(data)
        elif code == GRAB:
            session = command["session"] or self.session
            threading.Thread(target=self.grab, args=(session,), daemon=True).start()
        elif code == RESET:
            threading.Thread(target=self.home, daemon=True).start()
        else:
            log.info("command %s needs nothing from this machine", code)

    def grab(self, session):
        won = drop_claw_and_wait_for_prize(self.args.result_delay, self.args.win_rate)
        self.publish_result(won, session)

    def publish_result(self, won, session):
        # Echo the game's session: a result that comes after the gateway closed
        # its game (result timeout) is then recognised as stale and cannot end
        # the next player's game. QoS 1 and never retained (a retained result
        # would be ignored). Numbered, and repeated every 2 s until the gateway
        # confirms it on result/ack: the broker's PUBACK says only that the
        # gateway's client got it, not that the game's end is on its disk.
        with self.results_lock:
            serial, self.next_serial = self.next_serial, self.next_serial + 1
            result = {"command": RESULT, "data": "true" if won else "false", "serial": serial}
            if session:
                result["session"] = session
            payload = json.dumps(result, separators=(",", ":"))
            self.unconfirmed[serial] = (payload, time.monotonic() + self.args.result_timeout)
        self.client.publish(self.result, payload, qos=1)
        log.info("result: %s", result)
        self.repeat_result_later(serial)

    def repeat_result_later(self, serial):
        timer = threading.Timer(RESULT_REPEAT, self.repeat_result, args=(serial,))
        timer.daemon = True
        timer.start()

    def repeat_result(self, serial):
        with self.results_lock:
            pending = self.unconfirmed.get(serial)
            if pending is None:
                return
            payload, give_up_at = pending
            if time.monotonic() >= give_up_at:
                del self.unconfirmed[serial]
                log.warning("result %d never confirmed within --result-timeout; no longer repeated", serial)
                return
        self.client.publish(self.result, payload, qos=1)
        log.info("result repeated (not confirmed yet): %s", payload)
        self.repeat_result_later(serial)

    def result_confirmed(self, payload):
        try:
            confirmation = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            confirmation = None
        serial = confirmation.get("serial") if isinstance(confirmation, dict) else None
        if not isinstance(serial, int) or isinstance(serial, bool):
            log.warning("ignored an unreadable result confirmation: %r", payload[:200])
            return
        with self.results_lock:
            known = self.unconfirmed.pop(serial, None) is not None
        if known:
            log.info("result %d confirmed", serial)

    def home(self):
        # The reset's ack went out first; a fresh `online` after it takes the
        # machine out of maintenance (docs/PROTOCOL.md, "Faults, maintenance and reset").
        if home_gantry():
            self.say_online("gantry home")

    def say_online(self, why):
        self.client.publish(self.state, "online", qos=1, retain=True)
        log.info("%s; online again", why)

    def publish_fault(self, code, text):
        # QoS 1, never retained: a fault is an event (docs/TOPICS.md).
        fault = {"code": code, "text": text}
        self.client.publish(self.fault, json.dumps(fault, separators=(",", ":")), qos=1)
        log.warning("fault: %s", fault)

    # --- With --serial: the board does the hardware's work. -------------------

    def drive_board(self, command):
        code, data, board = command["command"], command["data"], self.board
        if code == MOVE:
            try:
                board.move(data)
                log.info("board: move %s", data)
            except ValueError as error:
                log.warning("board: move ignored: %s", error)
        elif code == CAMERA:
            switch_camera(data)
        elif code == ADD_COINS:
            self.session = command["session"]  # a new game
            try:
                game_time, powers, strong, lift_height = game_settings(command["settings"])
                board.start(game_time, powers, strong, lift_height)
            except ValueError as error:
                # The board is not started: the gateway ends the game on the fault.
                self.publish_fault("invalid_parameters", f"the coin's settings: {error}")
                return
            log.info("board: start game_time=%d claw=%s lift_height=%d strong=%s",
                     game_time, powers or "board's own", lift_height, strong)
        elif code == GRAB:
            self.session = command["session"] or self.session
            board.grab()
            log.info("board: grab")
        elif code == RESET:
            board.reset()
            log.info("board: reset sent; waiting for the gantry to be home")
        else:
            log.info("command %s needs nothing from this machine", code)

    def board_result(self, won, value):
        # The board also grabs by itself when the game time is up: its result
        # belongs to the game of the last coin (or grab).
        session, self.session = self.session, None
        if session is None:
            log.warning("board: a result (%d) with no game in progress; not published", value)
            return
        self.publish_result(won, session)

    def board_ready(self):
        self.say_online("board: gantry home")

    def run(self, stop):
        if self.board is not None:
            try:
                self.board.open()
            except ImportError:
                log.error("--serial needs pyserial: apt-get install python3-serial (or pip install pyserial)")
                return 2
            except Exception as error:  # noqa: BLE001 - serial.SerialException, OSError
                log.error("cannot open the board's port %s: %s", self.args.serial, error)
                return 2
        self.client.connect_async(self.args.host, self.args.port, keepalive=10, clean_start=True)
        self.client.loop_start()  # connects, and reconnects, in the background
        stop.wait()
        # A clean disconnect does not fire the will: say offline ourselves.
        try:
            self.client.publish(self.state, "offline", qos=1, retain=True).wait_for_publish(timeout=3)
        except (RuntimeError, ValueError) as error:
            log.warning("could not publish offline (%s)", error)
        self.client.disconnect()
        self.client.loop_stop()
        if self.board is not None:
            self.board.close()
        log.info("offline; stopped")
        return 0


def main():
    parser = argparse.ArgumentParser(description="A reference claw machine PC for claw-gateway.")
    parser.add_argument("--host", default="127.0.0.1", help="the MQTT broker (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="its port (default 1883, or 8883 with --tls-ca)")
    parser.add_argument("--machine", required=True, help="this machine's id in gateway.yaml, e.g. m1")
    parser.add_argument("--username", help="broker username (default: the machine id)")
    parser.add_argument("--password", help="broker password; visible in ps, prefer CLAW_PC_PASSWORD or --password-file")
    parser.add_argument("--password-file", help="a file whose first line is the broker password")
    parser.add_argument("--topic-prefix", default="claw", help="mqtt.topic_prefix of gateway.yaml (default claw)")
    parser.add_argument("--tls-ca", help="CA certificate of the broker: connect with TLS")
    parser.add_argument("--camera-topic", help="the machine's camera_topic (default <prefix>/<machine>/camera)")
    parser.add_argument("--result-delay", type=float, default=3.0, help="stand-in: seconds from grab to result")
    parser.add_argument("--win-rate", type=float, default=0.3, help="stand-in: chance of a win, 0 to 1")
    parser.add_argument("--result-timeout", type=float, default=20.0,
                        help="game.result_timeout of gateway.yaml: how long a result not confirmed is repeated (default 20)")
    parser.add_argument("--serial", metavar="PATH", help="drive the mainboard on this serial port (board.py) instead of the stubs")
    parser.add_argument("--baud", type=int, default=115200, help="the board's baud rate (default 115200)")
    parser.add_argument("--board-timeout", type=float, default=5.0,
                        help="seconds without a frame from the board before the fault board_silent (default 5)")
    args = parser.parse_args()
    if args.board_timeout <= 0:
        parser.error("--board-timeout must be more than 0")
    if args.result_timeout <= 0:
        parser.error("--result-timeout must be more than 0")
    args.username = args.username or args.machine
    args.port = args.port or (8883 if args.tls_ca else 1883)
    password = args.password
    if not password and args.password_file:
        with open(args.password_file, encoding="utf-8") as file:
            password = file.readline().strip()
    password = password or os.environ.get("CLAW_PC_PASSWORD")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    stop = threading.Event()
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: stop.set())
    sys.exit(ClawPC(args, password or None).run(stop))


if __name__ == "__main__":
    main()
