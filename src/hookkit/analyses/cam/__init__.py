"""``hookkit.cam`` and ``hookkit.cam_metric``: class activation maps, one template, methods as a table.

``template`` is the template (run, record, map the layout, weigh, sum, relu, scale, resize, average);
``methods`` holds the table of CAM methods: a method is one weight function and one ``METHODS`` entry
there, so adding one touches that file only. ``layouts`` maps layer outputs to ``[N, C, *spatial]``,
``forwards`` runs the methods that run the model again (ScoreCAM, AblationCAM), ``metrics`` scores maps
(ROAD, confidence drop), ``stream`` writes maps over a data set to a features folder, ``shortcuts``
holds ``gradcam`` / ``gradcam_plus_plus``.
"""

from hookkit.analyses.cam.metrics import cam_metric
from hookkit.analyses.cam.shortcuts import gradcam, gradcam_plus_plus
from hookkit.analyses.cam.template import cam

__all__ = ["cam", "cam_metric", "gradcam", "gradcam_plus_plus"]
