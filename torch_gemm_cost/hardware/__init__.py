"""The hardware a prediction is for: the device catalog and local-device detection
(``catalog``), datasheet spec files (``datasheet``), compute dtypes (``dtypes``) and the one
resolver of a user's device argument (``target``)."""
