#ifndef CLAW_CMOSQUITTO_SHIM_H
#define CLAW_CMOSQUITTO_SHIM_H

#include <mosquitto.h>
#include <mqtt_protocol.h>

#endif
