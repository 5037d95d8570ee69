#!/usr/bin/python3
"""A Modbus slave for fieldlink's integration tests, built on pymodbus 3.0.

It serves a register map for slave ids 1 and 2, either as a Modbus TCP
server or as an RTU slave on a serial port (a pty in the tests), and prints
a line "READY" on stdout once it is listening. Writes (functions 5, 6, 15
and 16) change the map until the server stops; on RTU, slave id 0 is a
broadcast that both slaves execute without replying.

Register map, identical for both slaves except where noted; addresses 0..99
are mapped, anything else answers exception 2 (illegal data address):

    holding register i   = 1000 * slave + i
    input register i     = 1000 * slave + 500 + i
    coil i               = on when i % 3 == 0
    discrete input i     = on when i % 2 == 1

Read Device Identification (43/14) answers vendor "fieldlink-test",
product code "PM-1", revision "3.0" and model name "pymodbus test slave".

Usage:
    pymodbus_server.py --tcp PORT
    pymodbus_server.py --rtu /dev/pts/N [--baud 9600]
"""
import argparse
import asyncio
import logging
import sys

from pymodbus.datastore import (
    ModbusSequentialDataBlock,
    ModbusServerContext,
    ModbusSlaveContext,
)
from pymodbus.device import ModbusDeviceIdentification
from pymodbus.framer.rtu_framer import ModbusRtuFramer
from pymodbus.server.async_io import ModbusSerialServer, ModbusTcpServer

SIZE = 100


def slave_context(slave):
    return ModbusSlaveContext(
        hr=ModbusSequentialDataBlock(0, [1000 * slave + i for i in range(SIZE)]),
        ir=ModbusSequentialDataBlock(0, [1000 * slave + 500 + i for i in range(SIZE)]),
        co=ModbusSequentialDataBlock(0, [i % 3 == 0 for i in range(SIZE)]),
        di=ModbusSequentialDataBlock(0, [i % 2 == 1 for i in range(SIZE)]),
        # pymodbus otherwise adds 1 to every address (1-based PLC numbering).
        zero_mode=True,
    )


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--tcp", type=int, metavar="PORT", help="serve Modbus TCP on 127.0.0.1:PORT")
    mode.add_argument("--rtu", metavar="DEVICE", help="serve Modbus RTU on a serial device")
    parser.add_argument("--baud", type=int, default=9600)
    parser.add_argument("--debug", action="store_true", help="log pymodbus internals to stderr")
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if args.debug else logging.WARNING)

    context = ModbusServerContext(slaves={1: slave_context(1), 2: slave_context(2)}, single=False)
    identity = ModbusDeviceIdentification(info_name={
        "VendorName": "fieldlink-test",
        "ProductCode": "PM-1",
        "MajorMinorRevision": "3.0",
        "ModelName": "pymodbus test slave",
    })
    if args.tcp is not None:
        server = ModbusTcpServer(context, identity=identity, address=("127.0.0.1", args.tcp), allow_reuse_address=True)
        task = asyncio.create_task(server.serve_forever())
        await server.serving
    else:
        server = ModbusSerialServer(
            context,
            framer=ModbusRtuFramer,
            identity=identity,
            port=args.rtu,
            baudrate=args.baud,
            bytesize=8,
            parity="N",
            stopbits=1,
            # Do not answer for slave ids we do not have: silence, like a
            # real bus.
            ignore_missing_slaves=True,
            broadcast_enable=True,
        )
        await server.start()
        if server.transport is None:
            sys.exit(f"cannot open {args.rtu}")
        task = asyncio.create_task(server.serve_forever())
    print("READY", flush=True)
    await task


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
