"""vaemem: measured VAE working-memory coefficients for image and video generation apps."""
__version__ = "0.1.0"
