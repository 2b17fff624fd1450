"""The environment's tools: every public function here is a tool the model may call.

Its JSON schema comes from the type hints and the `Args:` section of the docstring (edit both together). Each call
runs in a child process with a timeout; an exception becomes an `{"error": ...}` response the model sees, and a
value that is not a dict is sent as `{"result": value}`. Keep functions pure: the same arguments, the same answer.
"""

from typing import Literal

Unit = Literal["km", "mi", "m", "ft", "kg", "lb", "g", "oz", "C", "F"]

# how many of the base unit (km, kg) one unit is; temperatures are converted by formula below
FACTORS = {
    "km": 1.0,
    "mi": 1.609344,
    "m": 0.001,
    "ft": 0.0003048,
    "kg": 1.0,
    "lb": 0.45359237,
    "g": 0.001,
    "oz": 0.028349523125,
}
DIMENSION = {
    "km": "length",
    "mi": "length",
    "m": "length",
    "ft": "length",
    "kg": "mass",
    "lb": "mass",
    "g": "mass",
    "oz": "mass",
    "C": "temperature",
    "F": "temperature",
}


def convert(value: float, from_unit: Unit, to_unit: Unit) -> dict:
    """Convert a quantity from one unit to another, rounded to 2 decimals.

    Args:
        value: The quantity to convert.
        from_unit: The unit it is given in.
        to_unit: The unit wanted.
    """
    if DIMENSION[from_unit] != DIMENSION[to_unit]:
        raise ValueError(f"cannot convert {from_unit} ({DIMENSION[from_unit]}) to {to_unit} ({DIMENSION[to_unit]})")
    if from_unit == to_unit:
        result = value
    elif from_unit == "C":
        result = value * 9 / 5 + 32
    elif from_unit == "F":
        result = (value - 32) * 5 / 9
    else:
        result = value * FACTORS[from_unit] / FACTORS[to_unit]
    return {"value": round(result, 2), "unit": to_unit}
